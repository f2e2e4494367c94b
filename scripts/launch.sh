# Sourced by the experiment scripts: `launch <run.py flags>` runs on NGPU processes per node.
#   NGPU=4 bash scripts/...                      4 GPUs (or 4 CPU processes) on this node
#   NNODES=2 NODE_RANK=0|1 MASTER_ADDR=host0 MASTER_PORT=29500 NGPU=8 bash scripts/...   two nodes
# One process runs plain `python run.py`; more run torchrun ... run.py --ddp, through scripts/torchrun.py, which
# ends a stop or a failure in one line and the usual exit code. GPU ids are never hard-coded: restrict them with
# CUDA_VISIBLE_DEVICES if needed.
#   TUNE="--trials 10 --space seed=1:10" bash scripts/...   each run a search instead (scripts.tune: the script's
#   flags its base configuration, TUNE its options); the best configuration's final runs land in RESULTS
NGPU=${NGPU:-1}
NNODES=${NNODES:-1}
export DATA_ROOT=${DATA_ROOT:-./dataset}  # exported: run.py names it when a data file is missing
CHECKPOINTS=${CHECKPOINTS:-./checkpoints}
RESULTS=${RESULTS:-./results}

launch() {
  if [ -n "${TUNE:-}" ]; then
    # shellcheck disable=SC2086  # TUNE is a list of options: split on spaces
    python -m scripts.tune $TUNE --checkpoints "$CHECKPOINTS" --results_dir "$RESULTS" "$@"
  elif [ "$NNODES" -gt 1 ]; then
    python -m scripts.torchrun --nnodes="$NNODES" --node_rank="${NODE_RANK:?set NODE_RANK}" --nproc_per_node="$NGPU" \
      --rdzv_backend=c10d --rdzv_endpoint="${MASTER_ADDR:?set MASTER_ADDR}:${MASTER_PORT:-29500}" \
      run.py --ddp --checkpoints "$CHECKPOINTS" --results_dir "$RESULTS" "$@"
  elif [ "$NGPU" -gt 1 ]; then
    python -m scripts.torchrun --standalone --nproc_per_node="$NGPU" run.py --ddp --checkpoints "$CHECKPOINTS" --results_dir "$RESULTS" "$@"
  else
    python run.py --checkpoints "$CHECKPOINTS" --results_dir "$RESULTS" "$@"
  fi
}
