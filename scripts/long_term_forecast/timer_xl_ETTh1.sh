#!/usr/bin/env bash
# Timer-XL on ETTh1: one autoregressive model (672-point context = 7 tokens of 96), trained once,
# then rolled out to every horizon. Settings of OpenLTM's supervised Timer-XL script:
# d_model 1024, d_ff 2048, 1 layer, batch 32, lr 1e-4, 10 epochs, cosine schedule, instance norm,
# validation on the last token.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/launch.sh

common=(--model timer_xl --model_id ETTh1 --data ETTh1 --root_path "$DATA_ROOT/ETT-small/"
  --seq_len 672 --input_token_len 96 --output_token_len 96
  --d_model 1024 --d_ff 2048 --n_heads 8 --e_layers 1 --use_norm --valid_last
  --batch_size 32 --learning_rate 0.0001 --train_epochs 10 --lradj cosine)

launch "${common[@]}" --test_pred_len 96 "$@"
for test_pred_len in 192 336 720; do
  launch "${common[@]}" --is_training 0 --test_pred_len "$test_pred_len" "$@"
done
