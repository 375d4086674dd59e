"""Qwen3.5 hybrid language model in plain PyTorch (1.13 .. 2.x), with an
optional MTP ("nextn") head.

Written from ../shared/spec/architectures.md section 8. Parameter names and
semantics are those of Hugging Face's Qwen3.5 checkpoints (Qwen3_5ForCausalLM:
"model.layers.N.linear_attn.in_proj_qkv.weight", zero-centred RMSNorm weights
applied as 1 + w, A_log, value heads grouped by key head, MTP under "mtp."),
so a state_dict saved from this module is a Hugging Face checkpoint and
`wick convert` turns it into a GGUF.

Layer i of the main stack is a Gated DeltaNet layer unless (i + 1) is a
multiple of full_attention_interval, then gated full attention. Every layer
is  x += mixer(norm(x));  x += SwiGLU(norm(x)).  logits = W_out norm(x); the
output head is tied to the embedding.
"""
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


@dataclass
class Config:
    vocab_size: int = 16384
    hidden_size: int = 384
    intermediate_size: int = 1024
    num_hidden_layers: int = 8
    num_attention_heads: int = 6
    num_key_value_heads: int = 2
    head_dim: int = 64
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 64
    linear_value_head_dim: int = 64
    linear_num_key_heads: int = 3
    linear_num_value_heads: int = 6
    full_attention_interval: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e7
    partial_rotary_factor: float = 0.25
    max_position_embeddings: int = 16384
    mtp_num_hidden_layers: int = 0
    tie_word_embeddings: bool = True
    # token ids the export writes into config.json
    eos_token_id: int = 0
    pad_token_id: int = 0

    @property
    def rotary_dim(self):
        return int(self.head_dim * self.partial_rotary_factor)

    def layer_types(self):
        return ["full_attention" if (i + 1) % self.full_attention_interval == 0 else "linear_attention"
                for i in range(self.num_hidden_layers)]

    def mrope_section(self):
        """Three sections covering every rotated pair (text uses t = h = w)."""
        pairs = self.rotary_dim // 2
        s = [pairs // 3] * 3
        for i in range(pairs - sum(s)):
            s[i] += 1
        return s

    def to_hf(self):
        """config.json of a Hugging Face Qwen3_5ForCausalLM checkpoint."""
        d = asdict(self)
        d.pop("rope_theta")
        d.pop("partial_rotary_factor")
        d.update({
            "architectures": ["Qwen3_5ForCausalLM"],
            "model_type": "qwen3_5_text",
            "hidden_act": "silu",
            "attention_bias": False,
            "layer_types": self.layer_types(),
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": self.rope_theta,
                "partial_rotary_factor": self.partial_rotary_factor,
                "mrope_section": self.mrope_section(),
                "mrope_interleaved": True,
            },
            "torch_dtype": "bfloat16",
        })
        return d

    @staticmethod
    def from_hf(d):
        names = set(Config.__dataclass_fields__)
        c = Config(**{k: v for k, v in d.items() if k in names})
        rp = d.get("rope_parameters") or {}
        c.rope_theta = float(rp.get("rope_theta", d.get("rope_theta", c.rope_theta)))
        c.partial_rotary_factor = float(rp.get("partial_rotary_factor", d.get("partial_rotary_factor", 0.25)))
        return c


class RMSNorm(nn.Module):
    """Zero-centred RMSNorm: x / rms(x) * (1 + w), w initialised to 0."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(nn.Module):
    """Plain RMSNorm of each value head, times SiLU(gate) (the DeltaNet output norm)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, gate):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return (y * F.silu(gate.float())).type_as(x)


def rope_cos_sin(cfg, positions, device):
    """cos/sin [T, rotary_dim] for NEOX rotation (halves of the rotated part)."""
    rd = cfg.rotary_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, rd, 2, device=device, dtype=torch.float64) / rd))
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):
    """x [B, T, H, D]: rotate the first rotary_dim dims NEOX-style, keep the rest."""
    rd = cos.shape[-1]
    xr, xp = x[..., :rd].float(), x[..., rd:]
    half = rd // 2
    rot = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([(xr * c + rot * s).type_as(x), xp], dim=-1)


def causal_attention(q, k, v, scale):
    """q [B, H, T, D], k/v [B, Hkv, T, D]; query head h reads kv head h // (H / Hkv)."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    T = q.shape[2]
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    s = s.masked_fill(mask, float("-inf"))
    return (s.softmax(-1) @ v.float()).type_as(q)


class Attention(nn.Module):
    """Gated full attention: q_proj gives per head [query | gate]; out = o_proj(attn ⊙ σ(gate))."""

    def __init__(self, cfg):
        super().__init__()
        E, H, Hkv, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.H, self.Hkv, self.D = H, Hkv, D
        self.q_proj = nn.Linear(E, 2 * H * D, bias=False)
        self.k_proj = nn.Linear(E, Hkv * D, bias=False)
        self.v_proj = nn.Linear(E, Hkv * D, bias=False)
        self.o_proj = nn.Linear(H * D, E, bias=False)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        qg = self.q_proj(x).view(B, T, self.H, 2 * self.D)
        q, gate = qg[..., :self.D], qg[..., self.D:]
        q = apply_rope(self.q_norm(q), cos, sin)
        k = apply_rope(self.k_norm(self.k_proj(x).view(B, T, self.Hkv, self.D)), cos, sin)
        v = self.v_proj(x).view(B, T, self.Hkv, self.D)
        o = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.D ** -0.5)
        o = o.transpose(1, 2).reshape(B, T, self.H * self.D)
        return self.o_proj(o * torch.sigmoid(gate.reshape(B, T, self.H * self.D)))


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gated_delta_rule(q, k, v, g, beta, chunk=64):
    """Gated delta rule over a whole sequence in chunked (WY) form, spec 8.6.

    q, k: [B, H, T, dk] (L2-normalised, q already scaled); v: [B, H, T, dv];
    g (log decay <= 0), beta: [B, H, T]. Per head the state S (dk x dv) obeys
    S <- e^g S;  S <- S + k (beta (v - S^T k))^T;  o = S^T q.  Returns o
    [B, H, T, dv]. Float32 throughout."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (chunk - T % chunk) % chunk
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = (F.pad(t, (0, pad)) for t in (g, beta))
    n = (T + pad) // chunk
    q, k, v = (t.reshape(B, H, n, chunk, t.shape[-1]) for t in (q, k, v))
    g, beta = g.reshape(B, H, n, chunk), beta.reshape(B, H, n, chunk)
    G = g.cumsum(-1)                                           # cumulative log decay in the chunk
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    gamma = (G[..., :, None] - G[..., None, :]).masked_fill(~lower, float("-inf")).exp()  # e^(G_n - G_m), m <= n
    kb = k * beta[..., None]
    # I + A with A[n][m] = beta_n (k_n . k_m) gamma[n][m] strictly below the diagonal
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    ia = ((kb @ k.transpose(-1, -2)) * gamma).masked_fill(~strict, 0.0) + eye
    u = torch.linalg.solve_triangular(ia, v * beta[..., None], upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(ia, kb * G.exp()[..., None], upper=False, unitriangular=True)
    p = (q @ k.transpose(-1, -2)) * gamma                      # intra-chunk attention, diagonal included
    qd = q * G.exp()[..., None]
    kd = k * (G[..., -1:] - G).exp()[..., None]
    decay = G[..., -1].exp()[..., None, None]
    S = q.new_zeros(B, H, dk, dv)
    out = []
    for c in range(n):
        vc = u[:, :, c] - w[:, :, c] @ S
        out.append(qd[:, :, c] @ S + p[:, :, c] @ vc)
        S = S * decay[:, :, c] + kd[:, :, c].transpose(-1, -2) @ vc
    o = torch.stack(out, dim=2).reshape(B, H, n * chunk, dv)
    return o[:, :, :T]


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E = cfg.hidden_size
        self.Hk, self.Hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.key_dim, self.value_dim = self.Hk * self.dk, self.Hv * self.dv
        conv_dim = 2 * self.key_dim + self.value_dim
        self.K = cfg.linear_conv_kernel_dim
        self.in_proj_qkv = nn.Linear(E, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(E, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(E, self.Hv, bias=False)
        self.in_proj_a = nn.Linear(E, self.Hv, bias=False)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, self.K, groups=conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.A_log = nn.Parameter(torch.empty(self.Hv).uniform_(1.0, 16.0).log())
        self.norm = GatedRMSNorm(self.dv, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, E, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        c = self.in_proj_qkv(x).transpose(1, 2)                # [B, C, T]
        c = F.silu(F.conv1d(F.pad(c, (self.K - 1, 0)), self.conv1d.weight, groups=c.shape[1]))
        c = c.transpose(1, 2).float()
        q, k, v = c.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = l2norm(q.reshape(B, T, self.Hk, self.dk)) * self.dk ** -0.5
        k = l2norm(k.reshape(B, T, self.Hk, self.dk))
        v = v.reshape(B, T, self.Hv, self.dv)
        r = self.Hv // self.Hk                                 # value head j reads key head j // r
        if r > 1:
            q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
        beta = torch.sigmoid(self.in_proj_b(x).float())
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias.float())
        with torch.autocast(device_type=x.device.type, enabled=False):   # the scan stays in float32
            o = gated_delta_rule(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                 g.transpose(1, 2), beta.transpose(1, 2))
        z = self.in_proj_z(x).reshape(B, T, self.Hv, self.dv)
        o = self.norm(o.transpose(1, 2), z).type_as(x)
        return self.out_proj(o.reshape(B, T, self.value_dim))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, Fw = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(E, Fw, bias=False)
        self.up_proj = nn.Linear(E, Fw, bias=False)
        self.down_proj = nn.Linear(Fw, E, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg, full_attention):
        super().__init__()
        self.full = full_attention
        if full_attention:
            self.self_attn = Attention(cfg)
        else:
            self.linear_attn = GatedDeltaNet(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        h = self.input_layernorm(x)
        x = x + (self.self_attn(h, cos, sin) if self.full else self.linear_attn(h))
        return x + self.mlp(self.post_attention_layernorm(x))


class TextModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, t == "full_attention") for t in cfg.layer_types())
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class MTP(nn.Module):
    """One Qwen3.5 nextn block: from token x_{t+1} and the main model's final
    normed hidden state at t, predict x_{t+2} (spec 8.8)."""

    def __init__(self, cfg):
        super().__init__()
        E = cfg.hidden_size
        self.pre_fc_norm_embedding = RMSNorm(E, cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = RMSNorm(E, cfg.rms_norm_eps)
        self.fc = nn.Linear(2 * E, E, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(cfg, True)])
        self.norm = RMSNorm(E, cfg.rms_norm_eps)


class Qwen35ForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = TextModel(cfg)
        if cfg.mtp_num_hidden_layers:
            if cfg.mtp_num_hidden_layers != 1:
                raise ValueError("only one MTP layer is supported (as Qwen3.5)")
            self.mtp = MTP(cfg)
        self.reset_parameters()

    def reset_parameters(self):
        """GPT-2 style: N(0, 0.02), residual output projections scaled by 1/sqrt(2 L)."""
        std = 0.02
        out_std = std / math.sqrt(2 * self.cfg.num_hidden_layers)
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue
            if "conv1d" in name:
                nn.init.uniform_(p, -1.0 / math.sqrt(self.cfg.linear_conv_kernel_dim),
                                 1.0 / math.sqrt(self.cfg.linear_conv_kernel_dim))
            elif name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, 0.0, out_std)
            else:
                nn.init.normal_(p, 0.0, std)

    def n_params(self, with_mtp=True):
        return sum(p.numel() for n, p in self.named_parameters() if with_mtp or not n.startswith("mtp."))

    def hidden(self, ids):
        """Final normed hidden states [B, T, E] (what the LM head and MTP read)."""
        T = ids.shape[1]
        cos, sin = rope_cos_sin(self.cfg, torch.arange(T, device=ids.device), ids.device)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.model.norm(x)

    def head(self, h):
        return h @ self.model.embed_tokens.weight.t()

    def mtp_hidden(self, ids, h):
        """MTP hidden for positions 1..T-1: token ids[:, 1:] with h[:, :-1]; its
        logits at row t predict ids[:, t + 2]."""
        m = self.mtp
        e = m.pre_fc_norm_embedding(self.model.embed_tokens(ids[:, 1:]))
        u = m.fc(torch.cat([e, m.pre_fc_norm_hidden(h[:, :-1])], dim=-1))
        T = ids.shape[1]
        cos, sin = rope_cos_sin(self.cfg, torch.arange(1, T, device=ids.device), ids.device)
        for layer in m.layers:
            u = layer(u, cos, sin)
        return m.norm(u)

    def forward(self, ids):
        return self.head(self.hidden(ids))


def hf_state_dict(model, dtype=torch.bfloat16):
    """Tensors under their Hugging Face names (tied head: no lm_head.weight)."""
    sd = {}
    for k, v in model.state_dict().items():
        sd[k] = v.detach().to("cpu", dtype).contiguous()
    return sd
