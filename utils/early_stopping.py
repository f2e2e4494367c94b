import math


class EarlyStopping:
    """Stop after `patience` epochs without the validation loss improving by more than `delta`.

    Fed the all-reduced global validation loss, it reaches the same decision on every rank.
    A NaN loss never counts as an improvement.
    """

    def __init__(self, patience: int, delta: float = 0.0):
        self.patience, self.delta = patience, delta
        self.best = math.inf
        self.best_epoch = -1
        self.counter = 0
        self.stop = False

    def step(self, val_loss: float, epoch: int) -> bool:
        """Record one epoch's loss; True when it is the new best."""
        if val_loss <= self.best - self.delta:
            self.best, self.best_epoch, self.counter = val_loss, epoch, 0
            return True
        self.counter += 1
        self.stop = self.counter >= self.patience
        return False

    def state_dict(self) -> dict:
        return {"best": self.best, "best_epoch": self.best_epoch, "counter": self.counter, "stop": self.stop}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.best_epoch = state["best"], state["best_epoch"]
        self.counter, self.stop = state["counter"], state["stop"]
