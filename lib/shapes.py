"""Model shapes: the numbers of a decoder-only transformer that set its FLOPs and bytes.

A :class:`ModelShape` is read from a Hugging Face config (:meth:`ModelShape.from_config`) or taken
from the presets (Llama-3-8B and -70B for the course's tables; GPT-2 small and SmolLM2-135M, the
book's measured models). :mod:`lib.roofline` turns a shape into FLOPs and bytes; this module does
no arithmetic beyond counting weights and cache bytes, and measures nothing.

Conventions (those of the course roofline, ``data/reference/course_roofline_llama3_8b_h100.txt``):
``matmul_params`` holds the weights that take part in a matrix product for every token: in each
block the attention projections q, k, v, o (k and v sized for grouped-query attention,
``kv_heads * head_dim`` columns each) and the feed-forward network (three ``d_model x d_ff``
matrices when gated, as in SwiGLU; two when plain, as in GPT-2), plus the LM head
(``d_model x vocab``). The input embedding is a lookup, not a product, so it is left out, as are
learned position embeddings, norms and biases (a fraction of a per cent). A tied LM head shares the
embedding's matrix but is still a full product, so it counts.

Introduced in chapter 1 (the shapes of the two phases); used by every later chapter.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

from lib.dtypes import bytes_and_label

__all__ = ["ModelShape", "LLAMA3_8B", "LLAMA3_70B", "GPT2_SMALL", "SMOLLM2_135M", "PRESETS"]


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that set its FLOPs and bytes.

    ``gated_ffn`` is True for a SwiGLU feed-forward network (three ``d_model x d_ff`` matrices:
    gate, up, down; Llama, SmolLM2) and False for a plain one (two matrices; GPT-2).
    ``bytes_per_param`` is the size of one weight and one cached K or V value (2 for BF16/FP16,
    4 for FP32). ``tied_lm_head`` records whether the LM head shares the embedding matrix; it does
    not change the counts (a tied head is still a matrix product). ``dtype_name`` is a label for
    tables (derived from ``bytes_per_param`` when empty) and takes no part in equality.

    Introduced in chapter 1.
    """

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    d_ff: int
    vocab: int
    gated_ffn: bool = True
    bytes_per_param: float = 2
    tied_lm_head: bool = False
    dtype_name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for attr in ("layers", "d_model", "heads", "kv_heads", "d_ff", "vocab"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ValueError(f"ModelShape.{attr} must be a positive integer, got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})"
            )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}) "
                "for grouped-query attention"
            )
        bpp, label = bytes_and_label(self.bytes_per_param)
        object.__setattr__(self, "bytes_per_param", bpp)
        if not self.dtype_name:
            object.__setattr__(self, "dtype_name", label)

    @property
    def head_dim(self) -> int:
        """Width of one attention head, ``d_model // heads``."""
        return self.d_model // self.heads

    @property
    def lm_head_params(self) -> int:
        """Weights of the LM head, ``d_model * vocab`` (counted whether tied or not)."""
        return self.d_model * self.vocab

    @property
    def block_params(self) -> int:
        """Matmul weights of one transformer block: attention q, k, v, o plus the FFN."""
        kv_width = self.kv_heads * self.head_dim
        attention = self.d_model * (2 * self.d_model + 2 * kv_width)  # q and o; k and v (GQA)
        ffn = (3 if self.gated_ffn else 2) * self.d_model * self.d_ff
        return attention + ffn

    @property
    def matmul_params(self) -> int:
        """Weights that take part in a matrix product for every token: all blocks plus the LM
        head; the input embedding (a lookup), norms and biases are not counted."""
        return self.layers * self.block_params + self.lm_head_params

    @property
    def weight_bytes(self) -> float:
        """Bytes of the matmul weights, which every pass reads at least once."""
        return self.matmul_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of KV cache one token occupies: ``2 * layers * kv_heads * head_dim *
        bytes_per_param`` (K and V, every layer, grouped-query heads only)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_param

    def with_dtype(self, dtype: Any) -> ModelShape:
        """A copy stored in another dtype: a torch dtype (``torch.float16``), a name
        (``"bf16"``) or a number of bytes per parameter (``4``).

        Introduced in chapter 1.
        """
        bpp, label = bytes_and_label(dtype)
        return dataclasses.replace(self, bytes_per_param=bpp, dtype_name=label)

    @classmethod
    def from_config(
        cls, config: Any, name: str | None = None, bytes_per_param: Any = None
    ) -> ModelShape:
        """The shape of a Hugging Face model, read from its config (or from a model's ``.config``).

        Supported: GPT-2 configs (``model_type == "gpt2"``: ``n_layer``, ``n_embd``, ``n_head``,
        ``n_inner`` or ``4 * n_embd``, ``vocab_size``; plain FFN, multi-head attention) and
        Llama-family configs (``model_type == "llama"``, which includes SmolLM2:
        ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``,
        ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``; gated FFN). Anything else
        raises ``ValueError``.

        ``bytes_per_param`` (a torch dtype, a name or a number of bytes) should be the dtype you
        run in; when omitted it is the config's ``dtype`` if set, else FP32 (4 bytes).

        Introduced in chapter 1.
        """
        if not hasattr(config, "model_type") and hasattr(config, "config"):
            config = config.config  # a model was passed
        model_type = getattr(config, "model_type", None)
        if bytes_per_param is None:
            bytes_per_param = (
                getattr(config, "dtype", None) or 4
            )
        bpp, label = bytes_and_label(bytes_per_param)
        default_name = getattr(config, "name_or_path", "") or str(model_type)
        if model_type == "gpt2":
            d_model = config.n_embd
            return cls(
                name=name or default_name,
                layers=config.n_layer,
                d_model=d_model,
                heads=config.n_head,
                kv_heads=config.n_head,
                d_ff=config.n_inner if config.n_inner is not None else 4 * d_model,
                vocab=config.vocab_size,
                gated_ffn=False,
                bytes_per_param=bpp,
                tied_lm_head=bool(getattr(config, "tie_word_embeddings", True)),
                dtype_name=label,
            )
        if model_type == "llama":
            d_model, heads = config.hidden_size, config.num_attention_heads
            head_dim = getattr(config, "head_dim", None)
            if head_dim is not None and head_dim * heads != d_model:
                raise ValueError(
                    f"config has head_dim {head_dim} with {heads} heads and hidden_size {d_model}; "
                    "ModelShape assumes head_dim == hidden_size // num_attention_heads"
                )
            kv_heads = getattr(config, "num_key_value_heads", None) or heads
            return cls(
                name=name or default_name,
                layers=config.num_hidden_layers,
                d_model=d_model,
                heads=heads,
                kv_heads=kv_heads,
                d_ff=config.intermediate_size,
                vocab=config.vocab_size,
                gated_ffn=True,
                bytes_per_param=bpp,
                tied_lm_head=bool(getattr(config, "tie_word_embeddings", False)),
                dtype_name=label,
            )
        raise ValueError(
            f"unsupported model config type {model_type!r}: ModelShape.from_config reads "
            "'gpt2' (GPT-2) and 'llama' (Llama family, including SmolLM2) configs; for another "
            "architecture build a ModelShape by hand"
        )


#: Llama-3-8B in BF16 (published config; the course table's model). Chapter 6.
LLAMA3_8B = ModelShape("Llama-3-8B", 32, 4096, 32, 8, 14336, 128256,
                       gated_ffn=True, bytes_per_param=2, tied_lm_head=False, dtype_name="BF16")
#: Llama-3-70B in BF16 (the course's "try it"). Chapter 6.
LLAMA3_70B = ModelShape("Llama-3-70B", 80, 8192, 64, 8, 28672, 128256,
                        gated_ffn=True, bytes_per_param=2, tied_lm_head=False, dtype_name="BF16")
#: GPT-2 small in FP32, the book's measured model (plain FFN, tied head, multi-head attention).
GPT2_SMALL = ModelShape("GPT-2 small", 12, 768, 12, 12, 3072, 50257,
                        gated_ffn=False, bytes_per_param=4, tied_lm_head=True, dtype_name="FP32")
#: SmolLM2-135M in BF16, the book's real pretrained model (GQA: 9 query heads, 3 KV heads).
SMOLLM2_135M = ModelShape("SmolLM2-135M", 30, 576, 9, 3, 1536, 49152,
                          gated_ffn=True, bytes_per_param=2, tied_lm_head=True, dtype_name="BF16")

#: The presets by name.
PRESETS: dict[str, ModelShape] = {
    s.name: s for s in (LLAMA3_8B, LLAMA3_70B, GPT2_SMALL, SMOLLM2_135M)
}
