"""dape_core: a reference reproduction of DAPE V2 (Zheng et al., arXiv 2410.04798).

Modules (one concept each): ``encodings`` (positional biases), ``dape`` (the score processor),
``attention`` (the score pipeline), ``model`` (decoder and CHE encoder), ``data``, ``train``,
``evaluate``, ``timing``, ``che`` and ``report``.
"""

__version__ = "0.1.0"
