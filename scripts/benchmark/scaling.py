"""Projected data-parallel scaling of Timer-XL pre-training: bytes each GPU sends per step under DDP and FSDP, and
step time and efficiency on 1-64 GPUs, from a model's parameter count, a compute time per step and link
bandwidths. A model on paper, printed as the tables of docs/scaling.md (a test keeps them equal).

    python -m scripts.benchmark.scaling > /tmp/tables.md

Assumptions (docs/scaling.md says why):
- ring collectives: an all-reduce moves 2 (W-1)/W of the buffer through each GPU's link, an all-gather or a
  reduce-scatter (W-1)/W; DDP all-reduces fp32 gradients once per step; FSDP (parameters resharded after
  forward) all-gathers bf16 parameters in forward and again in backward and reduce-scatters fp32 gradients;
- bandwidth per GPU: 360 GB/s over NVLink inside a node of 8, 45 GB/s over InfiniBand (one 400 Gb/s NDR port per
  GPU, ~90% achieved) once the group spans nodes; the slowest link sets a ring's pace;
- compute: 6 x parameters x tokens FLOPs per step (forward + backward) at 40% of an H100's 989 bf16 TFLOP/s;
- communication overlaps the backward pass (the last layer's gradients are ready first): step = max(compute,
  communication) + 10% of the communication that cannot hide (the first bucket waits for the end of backward).
"""
import sys

GPU_FLOPS = 0.4 * 989e12
NVLINK, INFINIBAND, GPUS_PER_NODE = 360e9, 45e9, 8
WORLDS = (1, 2, 4, 8, 16, 32, 64)
# (name, run.py model flags, windows per GPU per step, tokens per window)
MODELS = [("Timer-XL d256x4 (docs/performance.md's corpus run)", ["--d_model", "256", "--d_ff", "512", "--e_layers",
                                                                  "4", "--n_heads", "8"], 32, 7),
          ("Timer-XL d1024x8 (issue 17's 100M)", ["--d_model", "1024", "--d_ff", "4096", "--e_layers", "8",
                                                 "--n_heads", "16"], 32, 7),
          ("Timer-XL d1024x8, 2048 windows per GPU", ["--d_model", "1024", "--d_ff", "4096", "--e_layers", "8",
                                                      "--n_heads", "16"], 2048, 7)]


def parameters(flags: list) -> int:
    import models
    from exp.config import parse_args, resolve
    from exp.flags import model_hparams
    args = resolve(parse_args(["--model", "timer_xl", "--seq_len", "672", "--input_token_len", "96",
                               "--output_token_len", "96", *flags]))
    model = models.build("timer_xl", {**args.as_dict(), "enc_in": 1, "n_marks": 0}, model_hparams(args))
    return sum(p.numel() for p in model.parameters())


def bytes_per_step(params: int, world: int, fsdp: bool) -> float:
    """Bytes through each GPU's link per step."""
    if world == 1:
        return 0.0
    share = (world - 1) / world
    return share * params * (2 * 2 + 4) if fsdp else 2 * share * params * 4


def step_seconds(compute: float, params: int, world: int, fsdp: bool) -> float:
    bandwidth = NVLINK if world <= GPUS_PER_NODE else INFINIBAND
    comm = bytes_per_step(params, world, fsdp) / bandwidth
    return max(compute, comm) + 0.1 * comm


def tables() -> str:
    out = []
    for name, flags, windows, tokens in MODELS:
        params = parameters(flags)
        compute = 6 * params * windows * tokens / GPU_FLOPS
        out += [f"**{name}**: {params / 1e6:.1f} M parameters, {windows} windows x {tokens} tokens per GPU, "
                f"compute {compute * 1e3:.2f} ms per step.", "",
                "| GPUs | DDP MB sent per GPU | DDP step ms | DDP efficiency | FSDP MB sent per GPU | FSDP step ms | "
                "FSDP efficiency |", "|---|---|---|---|---|---|---|"]
        for world in WORLDS:
            cells = []
            for fsdp in (False, True):
                step = step_seconds(compute, params, world, fsdp)
                cells += [f"{bytes_per_step(params, world, fsdp) / 1e6:.0f}", f"{step * 1e3:.2f}",
                          f"{compute / step:.0%}"]
            out.append(f"| {world} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(tables())
