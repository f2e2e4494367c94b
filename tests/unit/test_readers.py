"""Readers and the data factory: standard borders and train-only scaling, CSV and NumPy files."""
import numpy as np
import torch


def _args(**kw):
    from exp.config import parse_args, resolve
    flags = [token for k, v in kw.items() for token in (f"--{k}", str(v))]
    return resolve(parse_args(["--seq_len", "96", "--input_token_len", "48", "--output_token_len", "24", *flags]))


def test_ett_uses_the_standard_borders_and_scales_on_train_only(tmp_path):
    from data_provider import synthetic
    from data_provider.factory import build_data
    frame = synthetic.generate(length=20 * 30 * 24 + 50, n_covariates=2, seed=0)
    synthetic.write_csv(frame, str(tmp_path / "ETTh1.csv"))
    bundle = build_data(_args(data="ETTh1", root_path=str(tmp_path)), torch.device("cpu"), True, False)
    train, val, test = (bundle.datasets[s] for s in ("train", "val", "test"))
    month = 30 * 24
    assert train.n_windows == 12 * month - 96 - 24 + 1
    assert val.n_windows == 4 * month - 24 + 1 and test.n_windows == 4 * month - 24 + 1
    train_rows = frame.iloc[:12 * month, 1:].to_numpy()
    assert np.allclose(bundle.scaler.mean, train_rows.mean(0)) and bundle.columns[-1] == "OT"
    assert torch.allclose(train.series[:12 * month].mean(0), torch.zeros(3), atol=1e-4)
    # row-major although pandas hands out column-major values: a window is one contiguous run of rows
    assert train.series.is_contiguous() and train.gather(torch.tensor([7, 0, 100])).x.stride() == (120 * 3, 3, 1)


def test_standard_scale_matches_sklearn_and_centres_a_constant_channel():
    from sklearn.preprocessing import StandardScaler

    from data_provider.factory import StandardScale
    rng = np.random.default_rng(0)
    rows = np.column_stack([rng.normal(5.0, 3.0, 500), np.full(500, 0.1), rng.integers(0, 9, 500)])
    ours, reference = StandardScale.fit(rows), StandardScaler().fit(rows)
    assert np.allclose(ours.std, reference.scale_, rtol=1e-14, atol=0)
    assert np.allclose(ours.mean, reference.mean_, rtol=1e-14, atol=0)
    values = rng.normal(size=(50, 3)) * 10
    assert np.allclose(ours.transform(values), reference.transform(values), rtol=1e-14, atol=0)
    assert ours.std[1] == 1.0 and np.allclose(ours.transform(rows)[:, 1], 0.0)


def test_custom_csv_moves_the_target_last_and_npy_reads_raw_arrays(tmp_path):
    import pandas as pd

    from data_provider.readers import read_by_extension
    frame = pd.DataFrame({"date": pd.date_range("2020", periods=100, freq="D"), "OT": np.arange(100.0),
                          "x": np.ones(100)})
    frame.to_csv(tmp_path / "c.csv", index=False)
    table = read_by_extension(str(tmp_path / "c.csv"), "OT")
    assert table.columns == ["x", "OT"] and table.values[5, 1] == 5 and len(table.dates) == 100
    np.save(tmp_path / "a.npy", np.arange(30.0).reshape(10, 3))
    table = read_by_extension(str(tmp_path / "a.npy"), None)
    assert table.values.shape == (10, 3) and table.dates is None
