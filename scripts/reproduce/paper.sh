#!/usr/bin/env bash
# Rerun a paper's published long-term forecasting table, then print our numbers beside the paper's.
#   bash scripts/reproduce/paper.sh dlinear        # DLinear, Table 2 (Zeng et al., AAAI 2023): lookback 336, ILI 104
#   bash scripts/reproduce/paper.sh patchtst       # PatchTST/42, Table 3 (Nie et al., ICLR 2023); no Exchange there
#   bash scripts/reproduce/paper.sh itransformer   # iTransformer (Liu et al., ICLR 2024): lookback 96; no ILI there
#   bash scripts/reproduce/paper.sh timer_xl       # Timer-XL (Liu et al., ICLR 2025): one 672-lookback model per
#                                                  # dataset in 96-point tokens, rolled out to every horizon
#   bash scripts/reproduce/paper.sh nlinear        # NLinear, Table 2 (Zeng et al., AAAI 2023): lookback 336, ILI 104
#   bash scripts/reproduce/paper.sh sparsetsf      # SparseTSF (Lin et al., ICML 2024): lookback 720
#   bash scripts/reproduce/paper.sh segrnn         # SegRNN, IoT-J Table II (Lin et al.): lookback 720
#   bash scripts/reproduce/paper.sh cyclenet       # CycleNet/Linear (Lin et al., NeurIPS 2024): lookback 96
#   bash scripts/reproduce/paper.sh crossformer    # Crossformer at lookback 96 (iTransformer's baseline table)
# It runs the paper-setting scripts of scripts/long_term_forecast/ (settings and their sources are in
# scripts/make_scripts.py) into results/reproduce/, then analysis/report.py. NGPU, DATA_ROOT, HORIZONS and extra
# run.py flags work as in every script.
set -euo pipefail
cd "$(dirname "$0")/../.."
export RESULTS=${RESULTS:-./results/reproduce} CHECKPOINTS=${CHECKPOINTS:-./checkpoints/reproduce}

model=${1:?usage: paper.sh dlinear|patchtst|itransformer|timer_xl|nlinear|sparsetsf|segrnn|cyclenet|crossformer [run.py flags]}
shift
case $model in
  dlinear|timer_xl) datasets="ETTh1 ETTh2 Exchange ILI" ;;
  patchtst) datasets="ETTh1 ETTh2 ILI" ;;
  itransformer) datasets="ETTh1 ETTh2 Exchange" ;;
  nlinear) datasets="ETTh1 ILI" ;;
  sparsetsf|segrnn|cyclenet|crossformer) datasets="ETTh1" ;;
  *) echo "no reproduction set up for $model" >&2; exit 2 ;;
esac
for dataset in $datasets; do
  bash "scripts/long_term_forecast/${model}_${dataset}.sh" "$@"
done
python -m analysis.report "$RESULTS"
