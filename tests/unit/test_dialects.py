"""Time-Series-Library and OpenLTM scripts run unchanged: written as their scripts write them, they train the
configuration our own flags describe (one identity), and what cannot be honoured is one clear line."""
import os
import re
import shlex

import pytest

from exp import dialects
from exp.config import parse_args, resolve
from exp.identity import run_config
from tests.conftest import REPO
from utils.errors import ConfigError

# TSLib's long-term-forecasting scripts (scripts/long_term_forecast/Weather_script/*.sh there), shrunk to a
# tiny file: the flags are theirs, in their order; only the sizes are smaller
TSLIB_SCRIPTS = {
    "DLinear": "--task_name long_term_forecast --is_training 1 --root_path {root} --data_path weather.csv "
               "--model_id weather_24_8 --model DLinear --data custom --features M --seq_len 24 --label_len 12 "
               "--pred_len 8 --e_layers 2 --d_layers 1 --factor 3 --enc_in 3 --dec_in 3 --c_out 3 --des 'Exp' "
               "--itr 1 --train_epochs 1",
    "PatchTST": "--task_name long_term_forecast --is_training 1 --root_path {root} --data_path weather.csv "
                "--model_id weather_24_8 --model PatchTST --data custom --features M --seq_len 24 --label_len 12 "
                "--pred_len 8 --e_layers 2 --d_layers 1 --factor 3 --enc_in 3 --dec_in 3 --c_out 3 --des 'Exp' "
                "--d_model 16 --d_ff 32 --n_heads 2 --itr 1 --train_epochs 1",
    "iTransformer": "--task_name long_term_forecast --is_training 1 --root_path {root} --data_path weather.csv "
                    "--model_id weather_24_8 --model iTransformer --data custom --features M --seq_len 24 "
                    "--label_len 12 --pred_len 8 --e_layers 3 --enc_in 3 --dec_in 3 --c_out 3 --des 'Exp' "
                    "--d_model 16 --d_ff 16 --itr 1 --train_epochs 1",
    "TimesNet": "--task_name long_term_forecast --is_training 1 --root_path {root} --data_path weather.csv "
                "--model_id weather_24_8 --model TimesNet --data custom --features M --seq_len 24 --label_len 12 "
                "--pred_len 8 --e_layers 2 --d_layers 1 --factor 3 --enc_in 3 --dec_in 3 --c_out 3 --d_model 8 "
                "--d_ff 8 --top_k 2 --num_kernels 2 --des 'Exp' --itr 1 --train_epochs 1",
    "TimeMixer": "--task_name long_term_forecast --is_training 1 --root_path {root} --data_path weather.csv "
                 "--model_id weather_24_8 --model TimeMixer --data custom --features M --seq_len 24 --label_len 12 "
                 "--pred_len 8 --e_layers 2 --d_layers 1 --factor 3 --enc_in 3 --dec_in 3 --c_out 3 --des 'Exp' "
                 "--itr 1 --d_model 16 --d_ff 32 --batch_size 16 --learning_rate 0.01 --train_epochs 1 --patience 10 "
                 "--down_sampling_layers 2 --down_sampling_method avg --down_sampling_window 2",
    "Informer": "--task_name long_term_forecast --is_training 1 --root_path {root} --data_path weather.csv "
                "--model_id weather_24_8 --model Informer --data custom --features M --seq_len 24 --label_len 12 "
                "--pred_len 8 --e_layers 2 --d_layers 1 --factor 3 --enc_in 3 --dec_in 3 --c_out 3 --des 'Exp' "
                "--d_model 16 --d_ff 32 --n_heads 2 --distil --itr 1 --train_epochs 1",
}
# The same runs in our flags: TSLib's defaults for what its scripts leave out are written out here
TRAINING = "--learning_rate 0.0001 --batch_size 32 --train_epochs 1 --patience 3 --lradj type1 --seed 2021"
NATIVE = {
    "DLinear": f"--model dlinear --nonautoregressive --model_id weather_24_8 --data Weather --root_path {{root}} "
               f"--seq_len 24 --output_token_len 8 --moving_avg 25 --des Exp {TRAINING}",
    "PatchTST": f"--model patchtst --nonautoregressive --model_id weather_24_8 --data Weather --root_path {{root}} "
                f"--seq_len 24 --output_token_len 8 --e_layers 2 --d_model 16 --d_ff 32 --n_heads 2 --dropout 0.1 "
                f"--head_dropout 0.1 --activation gelu --patch_len 16 --stride 8 --use_norm --des Exp {TRAINING}",
    "iTransformer": f"--model itransformer --nonautoregressive --model_id weather_24_8 --data Weather "
                    f"--root_path {{root}} --seq_len 24 --output_token_len 8 --e_layers 3 --d_model 16 --d_ff 16 "
                    f"--n_heads 8 --dropout 0.1 --activation gelu --use_norm --freq h --des Exp {TRAINING}",
    "TimesNet": f"--model timesnet --nonautoregressive --model_id weather_24_8 --data Weather --root_path {{root}} "
                f"--seq_len 24 --output_token_len 8 --e_layers 2 --d_model 8 --d_ff 8 --top_k 2 --num_kernels 2 "
                f"--dropout 0.1 --use_norm --freq h --des Exp {TRAINING}",
    "TimeMixer": "--model timemixer --nonautoregressive --model_id weather_24_8 --data Weather --root_path {root} "
                 "--seq_len 24 --output_token_len 8 --e_layers 2 --d_model 16 --d_ff 32 --down_sampling_layers 2 "
                 "--down_sampling_window 2 --moving_avg 25 --dropout 0.1 --use_norm --freq h --des Exp "
                 "--learning_rate 0.01 --batch_size 16 --train_epochs 1 --patience 10 --lradj type1 --seed 2021",
    "Informer": f"--model informer --nonautoregressive --model_id weather_24_8 --data Weather --root_path {{root}} "
                f"--seq_len 24 --output_token_len 8 --label_len 12 --e_layers 2 --d_layers 1 --factor 3 --d_model 16 "
                f"--d_ff 32 --n_heads 2 --dropout 0.1 --activation gelu --no-distil --variant tslib --attn prob "
                f"--freq h --des Exp {TRAINING}",
}


def _argv(line: str, root, *extra) -> list:
    return shlex.split(line.format(root=root)) + ["--device", "cpu", *extra]


def _config(argv: list) -> dict:
    return run_config(resolve(parse_args(argv)), "weather.csv", "fingerprint", world_size=1)


@pytest.mark.parametrize("model", sorted(TSLIB_SCRIPTS))
def test_a_tslib_script_is_the_run_our_flags_describe(weather, model):
    assert _config(_argv(TSLIB_SCRIPTS[model], weather)) == _config(_argv(NATIVE[model], weather))


def test_what_tslibs_code_of_a_model_fixes_wins_over_its_flags(weather):
    dlinear = parse_args(_argv(TSLIB_SCRIPTS["DLinear"], weather, "--use_norm", "1"))
    assert dlinear.use_norm is False
    assert "--use_norm: ignored, as by TSLib (use_norm is False there for DLinear" in " ".join(dlinear.origin.notes)
    patchtst = parse_args(_argv(TSLIB_SCRIPTS["PatchTST"], weather, "--use_norm", "0", "--dropout", "0.3",
                                "--patch_len", "24"))
    assert patchtst.use_norm is True and patchtst.head_dropout == 0.3
    assert (patchtst.patch_len, patchtst.stride) == (16, 8)
    assert "--patch_len: ignored, as by TSLib (patch_len is 16 there" in " ".join(patchtst.origin.notes)
    ours = parse_args(_argv(TSLIB_SCRIPTS["PatchTST"], weather, "--head_dropout", "0.05", "--stride", "4"))
    assert (ours.head_dropout, ours.stride) == (0.05, 4), "flags only we have, given explicitly, win"
    seeded = parse_args(_argv(TSLIB_SCRIPTS["DLinear"], weather, "--seed", "7"))
    assert seeded.seed == 2021, "TSLib's run.py seeds 2021 whatever --seed says"
    timemixer = parse_args(_argv(TSLIB_SCRIPTS["TimeMixer"], weather, "--use_norm", "0"))
    assert timemixer.use_norm is False, "TSLib's TimeMixer reads --use_norm"
# OpenLTM's scripts/supervised/rolling_forecast/timer_xl_etth1.sh and adaptation/full_shot, shrunk: their flags
OPENLTM = ("--task_name forecast --is_training 1 --root_path {root} --data_path weather.csv --model_id weather "
           "--model timer_xl --data MultivariateDatasetBenchmark --seq_len 48 --input_token_len 16 "
           "--output_token_len 16 --test_seq_len 48 --test_pred_len 16 --batch_size 16 --learning_rate 0.0005 "
           "--train_epochs 4 --d_model 16 --d_ff 32 --gpu 0 --lradj type1 --use_norm --e_layers 1 --valid_last")
OURS = ("--model timer_xl --model_id weather --data Weather --root_path {root} --seq_len 48 --input_token_len 16 "
        "--output_token_len 16 --test_pred_len 16 --e_layers 1 --d_model 16 --d_ff 32 --n_heads 8 --dropout 0.1 "
        "--activation relu --batch_size 16 --learning_rate 0.0005 --train_epochs 4 --use_norm --valid_last --des test")


def test_an_openltm_script_is_the_run_our_flags_describe(weather, capfd):
    assert _config(_argv(OPENLTM, weather)) == _config(_argv(OURS + " --lradj type1", weather))
    cosine = _argv(OPENLTM + " --cosine --tmax 4 --num_workers 4", weather)
    assert _config(cosine) == _config(_argv(OURS + " --lradj cosine", weather)), "--cosine overrides --lradj"
    assert "--lradj type1: overridden by --cosine" in " ".join(parse_args(cosine).origin.notes)
    univariate = _argv(OPENLTM.replace("Multivariate", "Univariate"), weather)
    assert _config(univariate) == _config(_argv(OURS + " --lradj type1 --univariate", weather))


@pytest.mark.parametrize("change, message", [
    (("--tmax 4", "--tmax 10"), "--tmax 10 must equal --train_epochs (4)"),
    (("--test_seq_len 48 ", ""), "--test_seq_len (OpenLTM's default) 672 must equal --seq_len (48)"),
    (("--model timer_xl", "--model ttm"), "OpenLTM's TTM differs from ours: --mode (OpenLTM's default) mix_channel"),
    (("--gpu 0", "--subset_rand_ratio 0.5"), "OpenLTM trains on the first fraction of the windows"),
    (("--gpu 0", "--dp"), "--dp: DataParallel is not offered"),
])
def test_what_an_openltm_script_means_differently_is_refused(weather, change, message):
    line = (OPENLTM + " --cosine --tmax 4").replace(*change)
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve(parse_args(_argv(line, weather)))
# OpenLTM's scripts/supervised/forecast/ttm_etth1.sh (at aee327d, "fix some args in ttm"), as it is
OPENLTM_TTM = ("--task_name forecast --is_training 1 --root_path ./dataset/ETT-small/ --data_path ETTh1.csv "
               "--model_id ETTh1 --model ttm --data MultivariateDatasetBenchmark --seq_len 112 --input_token_len 16 "
               "--output_token_len 96 --test_seq_len 112 --test_pred_len 96 --batch_size 32 --learning_rate 1e-5 "
               "--train_epochs 10 --d_model 1024 --AP_levels 3 --lradj type1 --dropout 0.2 --use_norm --e_layers 3 "
               "--layers 2 --hidden_dim 64 --valid_last --patch_size 96 --nonautoregressive")


def test_openltms_ttm_script_is_refused_in_one_line_naming_what_ours_builds_otherwise():
    with pytest.raises(ConfigError) as refused:
        parse_args(shlex.split(OPENLTM_TTM))
    assert str(refused.value) == (
        "OpenLTM's TTM differs from ours: --mode (OpenLTM's default) mix_channel mixes channels in the backbone, "
        "ours in the decoder only (--d_mode mix_channel); --stride (OpenLTM's default) 8 with --patch_size 96 "
        "starts a patch every 8 points, ours lie end to end")


def test_openltms_ttm_flags_are_our_ttms_where_they_build_the_same_model(weather):
    """Its TTM with channel-independent mixers and patches end to end: --AP_levels, --patch_size, --layers,
    --hidden_dim and --d_mode are our hyper-parameters, its head's dropout is --dropout, and OpenLTM's defaults
    fill what the script leaves out (AP_levels 0 is one level of plain mixer layers)."""
    script = (OPENLTM_TTM.replace("--root_path ./dataset/ETT-small/ --data_path ETTh1.csv", "--root_path {root} "
                                  "--data_path weather.csv").replace("--patch_size 96", "--patch_size 16 --stride 16 "
                                                                     "--mode common_channel --use_decoder"))
    ours = ("--model ttm --model_id ETTh1 --data Weather --root_path {root} --nonautoregressive --seq_len 112 "
            "--output_token_len 96 --test_pred_len 96 --batch_size 32 --learning_rate 1e-5 --train_epochs 10 "
            "--d_model 1024 --ap_levels 3 --lradj type1 --dropout 0.2 --head_dropout 0.2 --use_norm --e_layers 3 "
            "--d_layers 2 --decoder_d_model 64 --decoder_mode common_channel --patch_len 16 --valid_last --des test")
    assert _config(_argv(script, weather)) == _config(_argv(ours, weather))
    notes = parse_args(_argv(script, weather)).origin.notes
    assert "--use_decoder: OpenLTM's TTM always has its decoder, as ours" in notes
    omitted = re.sub(r" --(AP_levels|layers|hidden_dim) \d+", "", script)
    assert _config(_argv(omitted, weather)) == _config(_argv(
        ours.replace("--ap_levels 3", "--ap_levels 1").replace("--d_layers 2", "--d_layers 8")
        .replace("--decoder_d_model 64", "--decoder_d_model 16"), weather))
    with pytest.raises(ConfigError, match="--patch_size and --patch_len both given"):
        parse_args(_argv(script + " --patch_len 8", weather))
    for change, message in ((("112", "120"), "--seq_len 120 is no multiple of --patch_size 16: its patches leave out "
                              "the window's last points"),
                            (("--test_pred_len 96", "--test_pred_len 192"), "--test_pred_len 192 with "
                             "--output_token_len 96: its head forecasts --test_pred_len points")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            parse_args(_argv(script.replace(*change), weather))
    declared = parse_args(_argv(script + " --n_vars 7", weather)).origin.declared_channels
    with pytest.raises(ConfigError, match="--n_vars 7, but the model sees 3 channel"):
        dialects.check_channels(declared, 3, False, "weather.csv")  # as run.py does once the data is read


@pytest.mark.parametrize("extra, message", [
    (["--use_multi_gpu", "--devices", "0,1"], "--use_multi_gpu: DataParallel is not offered: launch torchrun"),
    (["--gpu", "2"], "--gpu 2: each process uses cuda:LOCAL_RANK; run with CUDA_VISIBLE_DEVICES=2"),
    (["--inverse"], "--inverse: metrics are on the scaled data here"),
    (["--embed", "fixed"], "--embed fixed: only timeF time features are built here"),
    (["--jitter"], "unrecognized arguments: --jitter"),
    (["--output_token_len", "8"], "--pred_len and --output_token_len both given"),
    (["--task_name", "imputation"], "--task_name imputation: the forecasting tasks are long_term_forecast"),
    (["--pred_len", "abc"], "--pred_len: expected an integer, got 'abc'"),
    (["--factor", "--use_amp"], "--factor: expected a value"),
    (["--use_multi_gpu=False"], "--use_multi_gpu takes no value"),
])
def test_what_cannot_be_honoured_is_one_line_naming_the_flag(weather, extra, message):
    with pytest.raises(ConfigError, match=message):
        resolve(parse_args(_argv(TSLIB_SCRIPTS["DLinear"], weather, *extra)))


def test_the_tslib_mapping_table_is_generated_from_the_translation():
    with open(os.path.join(REPO, "docs", "tslib.md")) as f:
        assert f.read() == dialects.reference_markdown(), "regenerate it: python -m exp.dialects > docs/tslib.md"


# TSLib's scripts/short_term_forecast/<Model>_M4.sh, their common flags (the tests here read no data)
TSLIB_M4 = ("--task_name short_term_forecast --is_training 1 --root_path ./dataset/m4 --seasonal_patterns {subset} "
            "--model_id m4_{subset} --model {model} --data m4 --features M --e_layers 2 --d_layers 1 --factor 3 "
            "--enc_in 1 --dec_in 1 --c_out 1 --batch_size 16 --d_model 512 --des Exp --itr 1 --learning_rate 0.001 "
            "--loss SMAPE --device cpu")


def _m4(model: str, subset: str = "Yearly", extra: str = ""):
    return parse_args(shlex.split(TSLIB_M4.format(model=model, subset=subset) + extra))


@pytest.mark.parametrize("model", ["Informer", "Autoformer", "FEDformer", "Nonstationary_Transformer"])
def test_tslibs_short_term_task_sets_label_len_to_the_horizon_on_m4(model):
    """TSLib's exp_short_term_forecasting: pred_len the subset's horizon, seq_len twice it, label_len = pred_len
    whatever the line says (its run.py's 48 would exceed Yearly's lookback of 12)."""
    for subset, horizon in (("Yearly", 6), ("Monthly", 18), ("Hourly", 48)):
        config = resolve(_m4(model, subset))
        assert (config.seq_len, config.output_token_len, config.label_len) == (2 * horizon, horizon, horizon)
    said = _m4(model, "Quarterly", " --label_len 4 --seq_len 96 --pred_len 24")
    config = resolve(said)
    assert (config.seq_len, config.output_token_len, config.label_len) == (16, 8, 8)
    why = "ignored, as by TSLib (its short-term task sets it from the M4 Quarterly horizon, 8)"
    assert [f"--label_len 4: {why}", f"--seq_len 96: {why}", f"--pred_len 24: {why}"] == \
        sorted((n for n in said.origin.notes if "horizon, 8" in n), key=lambda n: ["--l", "--s", "--p"].index(n[:3]))
    assert not [n for n in _m4(model, "Quarterly", " --label_len 8").origin.notes if "label_len" in n]


def test_label_len_is_the_scripts_in_tslibs_long_term_task(weather):
    informer = parse_args(_argv(TSLIB_SCRIPTS["Informer"], weather))
    assert informer.label_len == 12
    assert parse_args(_argv(TSLIB_SCRIPTS["Informer"].replace(" --label_len 12", ""), weather)).label_len == 48


@pytest.mark.parametrize("model, fixed", [
    ("DLinear", {"use_norm": False}), ("Informer", {"variant": "tslib"}), ("MICN", {"variant": "tslib"}),
    ("FEDformer", {"modes": 32, "mode_select": "random"}), ("Crossformer", {"seg_len": 12}),
    ("iTransformer", {"use_norm": True}), ("TimesNet", {"use_norm": True})])
def test_what_tslibs_code_of_a_model_fixes_holds_on_m4_too(model, fixed):
    said = f" --use_norm {int(not fixed['use_norm'])}" if "use_norm" in fixed else ""  # the line says otherwise
    for subset in ("Yearly", "Hourly"):
        config = resolve(_m4(model, subset, said))
        assert {k: getattr(config, k) for k in fixed} == fixed, (model, subset)


def test_tslibs_micn_is_our_tslib_variant(weather):
    micn = ("--task_name long_term_forecast --is_training 1 --root_path {root} --data_path weather.csv --model_id w "
            "--model MICN --data custom --features M --seq_len 24 --label_len 24 --pred_len 8 --e_layers 2 "
            "--d_layers 1 --factor 3 --enc_in 3 --dec_in 3 --c_out 3 --d_model 16 --d_ff 16 --top_k 5 --des Exp "
            "--itr 1 --train_epochs 1")
    assert parse_args(_argv(micn, weather)).variant == "tslib"
    assert parse_args(_argv(micn, weather, "--variant", "official")).variant == "official", \
        "a flag only we have, given explicitly, wins"
    ours = ("--model micn --nonautoregressive --model_id w --data Weather --root_path {root} --seq_len 24 "
            "--output_token_len 8 --d_layers 1 --d_model 16 --dropout 0.1 --variant tslib --freq h --des Exp "
            f"{TRAINING}")
    assert _config(_argv(micn, weather)) == _config(_argv(ours, weather))


@pytest.mark.parametrize("written, widths", [
    ("--p_hidden_dims 256 256 --p_hidden_layers 2", "256,256"), ("--p_hidden_dims 64 --p_hidden_layers 1", "64"),
    ("--p_hidden_layers 3 --p_hidden_dims 8 16 32", "8,16,32"), ("--p_hidden_dims=32,32", "32,32"),
    ("--p_hidden_dims 256,256", "256,256")])
def test_tslibs_list_flags_take_its_several_values(written, widths):
    """TSLib's run.py declares --p_hidden_dims with nargs='+': `256 256` there, ours `256,256`; both are read."""
    config = resolve(_m4("Nonstationary_Transformer", extra=" " + written))
    assert config.p_hidden_dims == widths and config.seasonal_patterns == "Yearly"


@pytest.mark.parametrize("written, message", [
    ("--p_hidden_dims --p_hidden_layers 2", "--p_hidden_dims: expected a value"),
    ("--p_hidden_dims 256 x --p_hidden_layers 2", "--p_hidden_dims: expected an integer, got 'x'"),
    ("--p_hidden_dims=256 256", "unrecognized arguments: 256"),  # as TSLib's argparse: one value after '='
])
def test_tslibs_list_flags_refuse_in_one_line(written, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        resolve(_m4("Nonstationary_Transformer", extra=" " + written))
    assert "\n" not in str(refused.value)
