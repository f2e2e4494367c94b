from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """What a model supports; the framework checks flags against it at start-up.

    autoregressive: next-token training (output = output_token_len points after every input token)
                    and rolling forecasts; direct: one forecast of output_token_len points after the window.
    token_input: the input is cut into tokens of input_token_len, so seq_len must be a multiple of it.
    covariate: meaningful with all channels in and the loss on the target (last) channel.
    time_marks: forward uses the calendar features x_mark.
    """
    autoregressive: bool = False
    direct: bool = True
    covariate: bool = True
    token_input: bool = False
    time_marks: bool = False
