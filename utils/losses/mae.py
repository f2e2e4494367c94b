"""Mean absolute error: TSLib's --loss MAE."""
from torch.nn import functional

from utils.losses import Loss

LOSSES = [Loss("mae", functional.l1_loss, help="mean absolute error over every forecast point")]
