"""The M4 competition's accuracy measure beside MASE (utils/metrics/scaled.py; the short-term task gives it each
series' in-sample scale): sMAPE, per point 200 |y - f| / (|y| + |f|), in percent (utils/m4.py holds the
organisers' definitions), and OWA: the average over the windows of sMAPE and of MASE, each divided by its
average for the data's reference forecast (M4's Naive2) on the same windows, the two ratios averaged. A ratio of
averages, not a per-point value: the evaluator reports it beside the metrics, where the data have a reference."""
from utils.metrics import Metric


def smape(pred, true):
    return 200 * (pred - true).abs() / (pred.abs() + true.abs())


RELATIVE = ("smape", "mase")  # what OWA (utils/m4.py: owa) compares with the reference


METRICS = [Metric("smape", smape, help="symmetric mean absolute percentage error, in percent (M4)")]
