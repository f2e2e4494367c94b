"""What a model declares beside its code: its capabilities and its hyper-parameters.

A model's hyper-parameters are the fields of a dataclass `Config` next to its `Model` class. Each field is
a flag (`--<name>`), with its default, help text, valid range and the tiny value the contract test uses;
the framework builds the parser, validation, run identity and the flags reference from them. A model gets
those fields plus the task it is built for (see TASK_FIELDS), nothing else of the command line.
"""
from dataclasses import dataclass, field

# What the framework tells every model about its task (from the flags and the data):
#   seq_len, input_token_len, output_token_len: the lengths of the forecasting task;
#   enc_in: channels of the input; n_marks: width of the calendar features (0: none);
#   covariate: the last channel is the target, the others inform it;
#   n_outputs: values per forecast point: 1 (a point forecast) unless the loss asks for more (quantiles, a
#   distribution's parameters: utils/losses/), which only a model with the capability multi_output is given;
#   nonautoregressive: the run forecasts directly (--nonautoregressive), so a token model returns the forecast after
#   its last token alone (models/contract.expected_output_shape).
TASK_FIELDS = ("seq_len", "input_token_len", "output_token_len", "enc_in", "n_marks", "covariate", "n_outputs",
               "nonautoregressive")


@dataclass(frozen=True)
class Capabilities:
    """What a model supports; the framework checks flags against it at start-up.

    autoregressive: next-token training (output = output_token_len points after every input token)
                    and rolling forecasts; direct: one forecast of output_token_len points after the window.
    token_input: the input is cut into tokens of input_token_len, so seq_len must be a multiple of it.
    covariate: meaningful with all channels in and the loss on the target (last) channel.
    time_marks: forward uses the calendar features x_mark (batch, seq_len, n_marks).
    future_marks: with time_marks, x_mark also covers the horizon (batch, seq_len + output_token_len, n_marks):
                  calendar features are known ahead (what an encoder-decoder feeds its decoder).
    positions: forward also gets `position`, a (batch,) int64 tensor: the row of each window's first point
               in the whole series, so `position % period` is the window's phase in a cycle.
    exogenous: in covariate mode the model forecasts the target alone and returns (batch, time, 1); the
               other channels are inputs only, so its forecasts cannot be rolled beyond output_token_len.
    aux_loss: in training mode forward returns (prediction, terms): terms maps names to scalar loss terms,
              already weighted, that the framework adds to its loss and reports per epoch as global means.
    multi_output: with n_outputs k > 1 the output gains a last dimension of k values per forecast point
                  (batch, time, channels, k): the final projection widened (models/layers/outputs.py), each value
                  denormalised as a forecast is. With n_outputs 1 the model is exactly what it was: the same
                  parameters, made in the same order, and the same output.
    stateful: (autoregressive, a recurrent model) forward also takes `state`: () starts at a window, returning
              (output, state); the state returned, given back with x the points that follow (a multiple of
              input_token_len), continues from there. A rolled-out forecast then feeds each step's points alone and
              conditions on all of the history since the window began, at a cost linear in the horizon (sample
              paths, DeepAR). Without `state` forward is a plain forward over a window.
    """
    autoregressive: bool = False
    direct: bool = True
    covariate: bool = True
    token_input: bool = False
    time_marks: bool = False
    future_marks: bool = False
    positions: bool = False
    exogenous: bool = False
    aux_loss: bool = False
    multi_output: bool = False
    stateful: bool = False


@dataclass(frozen=True)
class Search:
    """Where tuning (scripts/tune.py) looks for a hyper-parameter by default: one of `choices`, or a value in
    [low, high] (an integer when the parameter is one; on a log scale if log)."""
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple | None = None


def hparam(default, help: str, *, tiny=None, low=None, high=None, choices=None, search: Search | None = None,
           later: bool = False):
    """A hyper-parameter field of a model's Config: the flag's default and help text, the contract test's
    small value (`tiny`, default: the default), what is valid: low <= value (< high), or one of choices, and
    the default search range of tuning (none: not tuned unless asked). `later`: added to a model that already has
    results, with a default that is the model as it was: at that default it stays out of a run's identity, so the
    earlier runs keep theirs (the rule of every flag added later: exp/identity.py, added_later)."""
    return field(default=default, metadata={"help": help, "tiny": default if tiny is None else tiny,
                                            "low": low, "high": high, "choices": choices, "search": search,
                                            "later": later})


# Hyper-parameters many models share: one definition, one help text.
def d_model(default: int = 512):
    return hparam(default, "width of token embeddings / hidden layers", tiny=16, low=1,
                  search=Search(choices=(64, 128, 256, 512)))


def n_heads(default: int = 8):
    return hparam(default, "attention heads", tiny=2, low=1)


def e_layers(default: int = 1):
    return hparam(default, "number of encoder layers", tiny=1, low=1, search=Search(1, 4))


def d_ff(default: int = 2048):
    return hparam(default, "hidden width of the feed-forward blocks", tiny=16, low=1)


def dropout(default: float = 0.1):
    return hparam(default, "dropout probability", tiny=0.0, low=0.0, high=1.0, search=Search(0.0, 0.5))


def activation(default: str = "relu"):
    return hparam(default, "feed-forward activation", choices=("relu", "gelu"))


def use_norm(default: bool = False):
    return hparam(default, "instance normalisation of each input window (RevIN without affine)")


def label_len(default: int = 48):
    return hparam(default, "decoder start tokens: the last label_len points of the window open the decoder's "
                           "input (TSLib's --label_len)", tiny=8, low=0)


def revin(default: bool = False):
    return hparam(default, "RevIN: instance normalisation of each window with learnable per-channel scale and "
                           "shift, inverted on the forecast", tiny=True)


@dataclass
class TransformerConfig:
    """The hyper-parameters of a plain Transformer encoder stack (iTransformer, Timer, Timer-XL)."""
    d_model: int = d_model()
    n_heads: int = n_heads()
    e_layers: int = e_layers()
    d_ff: int = d_ff()
    dropout: float = dropout()
    activation: str = activation()
    use_norm: bool = use_norm()


@dataclass(frozen=True)
class Published:
    """What a published checkpoint fixes of a run, as a model that reads its publisher's format reports it.

    A model file that loads published weights gives its Model two more members (docs/foundation.md):
        published(path) -> Published    a staticmethod: reads the checkpoint's configuration only, raising
                                        ValueError that names what it expected and found when `path` is not one
        load_published(self, path)      loads its weights into the model, every key accounted for
    and, for --finetune head, `head_modules`: the names of its output modules (those a model built otherwise lacks
    are passed over).

    hparams: the model's hyper-parameters the checkpoint's architecture has (its Config fields).
    task: the task flags the checkpoint needs at exactly this value (a patch length: input_token_len).
    max_seq_len: the longest context the checkpoint reads (None: any).
    defaults: hyper-parameters the checkpoint was trained with that fine-tuning may change (dropout): the flags'
              values where given, these otherwise.
    """
    hparams: dict
    task: dict = field(default_factory=dict)
    max_seq_len: int | None = None
    defaults: dict = field(default_factory=dict)
