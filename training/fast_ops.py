"""Training-speed replacements for two of transformers' pure-PyTorch Glm5Next paths (torch only, no transformers).

transformers 5.17 runs GLM-5.3's KDA with `chunk_kimi_delta_attention`, a Python loop over chunks (a 4096-token
batch is 256 iterations of small kernels, forward and backward) whose within-chunk decays are a [C, C, K] tensor,
and the MoE experts with a Python loop over experts that synchronises with the host for every expert. Round 1 of
the tiny model's training ran at ~45k tokens/s because of them (docs/tiny-model.md). The functions here compute
the same mathematics with a fixed, small number of large kernels:

  kda_chunk_parallel(q, k, v, g, beta, ...)   same signature and result as chunk_kimi_delta_attention:
      per chunk of C tokens, the WY/UT form (a triangular solve for T = (I + A)^-1) gives the chunk's transition
      S_{n+1} = M_n S_n + B_n of the FP32 state S [K, V]; a log-depth (Hillis-Steele) scan over the chunks gives
      every chunk's start state at once, and every chunk's output is then two batched matrix products.
  moe_experts_dense(experts, x, top_k_index, top_k_weights)
      same result as Glm5NextTextExperts.forward: every expert on every token as two GEMMs over the stacked
      expert weights (the tiny model's experts are 56 wide, so this costs less than the loop's launches), the
      routing weights zero for experts a token did not choose. Exact zeros: the unchosen experts contribute
      nothing to the output or to any gradient.

Numerics. The KDA recurrence per head (architecture reference, oracles.md section 2), state S in FP32:
    S <- diag(exp(g_t)) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
with g_t in (-5, 0) per channel. Within a chunk the decay between positions i >= j is exp(G_i - G_j) (G the
within-chunk cumulative sum). It is factored as exp(G_i - G_r) * exp(G_r - G_j) around the chunk's middle
position r, so that the [C, C] products are matrix products instead of a [C, C, K] tensor; with C = 16 each factor
stays below exp(5 * 8) = 2.4e17, finite in FP32 for the forward and the backward (with 64-token chunks and no
reference point transformers' own exponent reaches 315 and the backward turns NaN; docs/tiny-model.md).
"""

import torch
import torch.nn.functional as F

KDA_CHUNK = 16


def l2norm(x, eps=1e-6):
    """FLA's / transformers' l2norm: eps inside the square root (not F.normalize's max(norm, eps))."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _scan_chunks(M, Bn):
    """Inclusive scan of the affine maps S -> M_n S + B_n over the chunk axis (dim 2).
    M: [B, H, N, K, K], Bn: [B, H, N, K, V] -> (A, C) with S_{n+1} = A_n S_0 + C_n. Hillis-Steele: log2(N) levels,
    each one batched product for A and one for C (out of place, so autograd keeps every level)."""
    A, C = M, Bn
    N = M.shape[2]
    d = 1
    while d < N:
        C = torch.cat([C[:, :, :d], torch.matmul(A[:, :, d:], C[:, :, :-d]) + C[:, :, d:]], dim=2)
        if 2 * d < N:  # the last level's A is never read
            A = torch.cat([A[:, :, :d], torch.matmul(A[:, :, d:], A[:, :, :-d])], dim=2)
        d *= 2
    return A, C


def kda_chunk_parallel(query, key, value, g, beta, chunk_size=KDA_CHUNK, initial_state=None,
                       output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs):
    """query, key: [B, S, H, K]; value: [B, S, H, V]; g: [B, S, H, K] log-decays; beta: [B, S, H].
    -> (out [B, S, H, V] in query's dtype, final state [B, H, K, V] FP32 or None). FP32 inside."""
    if chunk_size > 16:
        raise ValueError(f"kda_chunk_parallel: chunk_size {chunk_size} > 16 would overflow exp() in FP32 at the "
                         "decay bound (see the module docstring)")
    dtype = query.dtype
    q, k, v, b, g = [x.transpose(1, 2).contiguous().to(torch.float32) for x in (query, key, value, beta, g)]
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    Bsz, H, S, K = k.shape
    V = v.shape[-1]
    C = chunk_size
    pad = (C - S % C) % C
    # padded positions have k = v = beta = 0 and g = 0: they neither decay nor write the state
    q = F.pad(q, (0, 0, 0, pad)) * (K ** -0.5)
    k, v, g = (F.pad(x, (0, 0, 0, pad)) for x in (k, v, g))
    b = F.pad(b, (0, pad))
    N = (S + pad) // C
    q, k, v, g = (x.reshape(Bsz, H, N, C, x.shape[-1]) for x in (q, k, v, g))
    b = b.reshape(Bsz, H, N, C, 1)

    G = g.cumsum(dim=3)                                  # [B, H, N, C, K] within-chunk cumulative log-decay
    Gr = G[:, :, :, C // 2:C // 2 + 1]                   # the reference position, [B, H, N, 1, K]
    up = torch.exp(G - Gr)                               # row side (i), <= exp(5 * C/2)
    down = torch.exp(Gr - G)                             # column side (j)
    k_down = k * down
    strict = torch.tril(torch.ones(C, C, dtype=torch.bool, device=k.device), diagonal=-1)
    causal = torch.tril(torch.ones(C, C, dtype=torch.bool, device=k.device))
    # A_ij = beta_i k_i . k_j exp(G_i - G_j), j < i; T = (I + A)^-1 (the WY/UT transform)
    A = torch.matmul(b * k * up, k_down.transpose(-1, -2)).masked_fill(~strict, 0.0)
    eye = torch.eye(C, dtype=A.dtype, device=A.device)
    T = torch.linalg.solve_triangular(A + eye, eye.expand_as(A), upper=False, unitriangular=True)
    U = torch.matmul(T, b * v)                           # [B, H, N, C, V]
    W = torch.matmul(T, b * k * torch.exp(G))            # [B, H, N, C, K]
    # P_ij = q_i . k_j exp(G_i - G_j), j <= i: the within-chunk attention
    P = torch.matmul(q * up, k_down.transpose(-1, -2)).masked_fill(~causal, 0.0)

    Gend = G[:, :, :, C - 1:C]                           # [B, H, N, 1, K]
    k_hat = k * torch.exp(Gend - G)                      # <= 1
    M = torch.diag_embed(torch.exp(Gend[:, :, :, 0])) - torch.matmul(k_hat.transpose(-1, -2), W)  # [B, H, N, K, K]
    Bn = torch.matmul(k_hat.transpose(-1, -2), U)        # [B, H, N, K, V]
    Acc, Ccc = _scan_chunks(M, Bn)
    if initial_state is None:
        S0 = torch.zeros(Bsz, H, 1, K, V, dtype=torch.float32, device=k.device)
        starts = torch.cat([S0, Ccc[:, :, :-1]], dim=2)
        final = Ccc[:, :, -1]
    else:
        S0 = initial_state.to(torch.float32).unsqueeze(2)
        reach = torch.matmul(Acc, S0) + Ccc              # S_{n+1}
        starts = torch.cat([S0, reach[:, :, :-1]], dim=2)
        final = reach[:, :, -1]
    out = torch.matmul(q * torch.exp(G), starts) + torch.matmul(P, U - torch.matmul(W, starts))
    out = out.reshape(Bsz, H, N * C, V)[:, :, :S].transpose(1, 2).contiguous().to(dtype)
    return out, (final if output_final_state else None)


def moe_experts_dense(experts, hidden, top_k_index, top_k_weights):
    """Glm5NextTextExperts.forward as two GEMMs over all experts. hidden: [T, D]; top_k_index, top_k_weights:
    [T, k] -> [T, D]. experts.gate_up_proj: [E, 2I, D] (gate rows first), experts.down_proj: [E, D, I]."""
    E, I2, D = experts.gate_up_proj.shape
    I = I2 // 2
    T = hidden.shape[0]
    # routing weights as a dense [T, E] matrix (zero where not chosen); a token never picks one expert twice
    w = torch.zeros(T, E, dtype=top_k_weights.dtype, device=hidden.device).scatter(1, top_k_index, top_k_weights)
    gate_up = F.linear(hidden, experts.gate_up_proj.reshape(E * I2, D)).view(T, E, I2)
    act = experts._apply_gate(gate_up)                   # [T, E, I]: transformers' own clamp + SiLU(gate) * up
    act = act * w.unsqueeze(-1).to(act.dtype)
    down = experts.down_proj.permute(1, 0, 2).reshape(D, E * I)   # [D, E*I]
    return F.linear(act.reshape(T, E * I), down).to(hidden.dtype)
