#!/usr/bin/env bash
# DLinear on ETTh1, one direct model per horizon.
# Settings of the paper (Zeng et al., AAAI 2023, Table 2) and its official scripts:
# lookback 336, lr 0.005, batch 32, 10 epochs, patience 3, lr halved each epoch (type1).
# Extra flags are passed to run.py, e.g. `bash scripts/long_term_forecast/dlinear_ETTh1.sh --train_epochs 1`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/launch.sh

for pred_len in 96 192 336 720; do
  launch --model dlinear --nonautoregressive --model_id ETTh1 \
    --data ETTh1 --root_path "$DATA_ROOT/ETT-small/" \
    --seq_len 336 --output_token_len "$pred_len" --test_pred_len "$pred_len" \
    --batch_size 32 --learning_rate 0.005 --train_epochs 10 --patience 3 --lradj type1 "$@"
done
