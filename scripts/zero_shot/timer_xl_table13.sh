#!/usr/bin/env bash
# Timer-XL (Liu et al., ICLR 2025) Table 13: the released thuml/timer-base-84m tested zero-shot on ETTh1 with a
# lookback of 2880 (the official zero-shot script's 30 x 96), each channel a series of its own; the published numbers
# are in scripts/reproduce/paper_results.csv (protocol zero_shot, checkpoint timer-base-84m).
#   huggingface-cli download thuml/timer-base-84m --local-dir ckpt/timer-base-84m     # once
#   TIMER=ckpt/timer-base-84m bash scripts/zero_shot/timer_xl_table13.sh
#   python -m analysis.report ./results                                               # the gaps
# Extra arguments are passed to run.py (docs/foundation.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/launch.sh
: "${TIMER:?set TIMER to the folder of thuml/timer-base-84m (huggingface-cli download thuml/timer-base-84m --local-dir DIR)}"

horizons=(${HORIZONS:-96 192 336 720})  # HORIZONS="96" runs one
for pred_len in "${horizons[@]}"; do
  launch --model timer_hf --pretrained "$TIMER" --is_training 0 --nonautoregressive --des timer-base-84m \
  --model_id ETTh1 --data ETTh1 --root_path "$DATA_ROOT/ETT-small/" \
  --seq_len 2880 --output_token_len "$pred_len" --batch_size 32 "$@"
done
