"""The loss of the long-term forecasting papers."""
from torch.nn import functional

from utils.losses import Loss

LOSSES = [Loss("mse", functional.mse_loss, help="mean squared error over every forecast point")]
