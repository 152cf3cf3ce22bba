"""training/fast_ops.py against independent references, on CPU torch (skipped where torch is missing):

  - kda_chunk_parallel against the token-by-token KDA recurrence in float64 (the recurrence of
    transformers' recurrent_kimi_delta_attention, written out here), outputs, final states and the gradients of
    every input, at lengths that are and are not multiples of the chunk, decays at the -5 bound, with and without
    an initial state;
  - moe_experts_dense against a per-expert loop (Glm5NextTextExperts.forward's), outputs and gradients.

The H200 run checks both against transformers' own functions again before training (glm53_torch.check_fast_ops).
"""

import unittest

try:
    import torch
except ImportError:  # the CPU machines without python3-torch
    torch = None

if torch is not None:
    import helpers  # noqa: F401  (puts training/ on sys.path)
    import fast_ops


def recurrent_kda(q, k, v, g, beta, initial_state=None):
    """o_t = S_t^T q_t with S_t = diag(exp g_t) S_{t-1} + k_t (beta_t (v_t - (diag(exp g_t) S_{t-1})^T k_t))^T,
    q, k l2-normalised (eps in the sqrt), q scaled by K^-0.5. Shapes as chunk_kimi_delta_attention's."""
    q, k = fast_ops.l2norm(q), fast_ops.l2norm(k)
    B, S, H, K = k.shape
    V = v.shape[-1]
    q = q * K ** -0.5
    state = torch.zeros(B, H, K, V, dtype=q.dtype) if initial_state is None else initial_state.to(q.dtype)
    out = []
    for t in range(S):
        state = state * g[:, t].exp().unsqueeze(-1)
        kv = (state * k[:, t].unsqueeze(-1)).sum(-2)
        u = (v[:, t] - kv) * beta[:, t].unsqueeze(-1)
        state = state + k[:, t].unsqueeze(-1) * u.unsqueeze(-2)
        out.append((state * q[:, t].unsqueeze(-1)).sum(-2))
    return torch.stack(out, dim=1), state


def kda_inputs(gen, B, S, H, K, V, at_bound):
    q, k = torch.randn(B, S, H, K, generator=gen), torch.randn(B, S, H, K, generator=gen)
    v = torch.randn(B, S, H, V, generator=gen)
    g = -5.0 * torch.rand(B, S, H, K, generator=gen)
    if at_bound:  # half the channels forget as fast as the gate allows
        g[..., : K // 2] = -4.999
    beta = torch.rand(B, S, H, generator=gen)
    return [x.double() for x in (q, k, v, g, beta)]


@unittest.skipIf(torch is None, "torch is not installed (apt-get install python3-torch)")
class KdaChunkParallel(unittest.TestCase):
    def compare(self, S, at_bound, with_state, chunk=16):
        gen = torch.Generator().manual_seed(1000 * S + 10 * at_bound + with_state)
        B, H, K, V = 2, 3, 8, 6
        ref_in = kda_inputs(gen, B, S, H, K, V, at_bound)
        s0 = torch.randn(B, H, K, V, generator=gen).double() * 0.5 if with_state else None
        for x in ref_in:
            x.requires_grad_(True)
        ref_o, ref_s = recurrent_kda(*ref_in, initial_state=s0)
        w_o = torch.randn(ref_o.shape, generator=gen).double()
        w_s = torch.randn(ref_s.shape, generator=gen).double()
        ((ref_o * w_o).sum() + (ref_s * w_s).sum()).backward()

        got_in = [x.detach().float().requires_grad_(True) for x in ref_in]
        o, s = fast_ops.kda_chunk_parallel(*got_in, chunk_size=chunk, initial_state=None if s0 is None else s0.float(),
                                           output_final_state=True, use_qk_l2norm_in_kernel=True)
        ((o * w_o.float()).sum() + (s * w_s.float()).sum()).backward()
        self.assertEqual(tuple(o.shape), (B, S, H, V))

        def rel(a, b):  # relative to the reference's largest entry; a gradient that is exactly 0 (g at S = 1,
            # where the state it decays is still zero) is compared in absolute terms below 1e-2
            return float((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-2))

        self.assertLess(rel(o, ref_o), 2e-5, f"output S={S}")
        self.assertLess(rel(s, ref_s), 2e-5, f"final state S={S}")
        for name, a, b in zip("q k v g beta".split(), got_in, ref_in):
            self.assertTrue(torch.isfinite(a.grad).all(), f"grad {name} not finite, S={S}")
            self.assertLess(rel(a.grad, b.grad), 1e-4, f"grad {name}, S={S}, bound={at_bound}, state={with_state}")

    def test_lengths_and_bounds(self):
        for S in (1, 5, 16, 17, 37, 64, 100):
            for at_bound in (False, True):
                self.compare(S, at_bound, with_state=False)

    def test_initial_state(self):
        for S in (3, 33, 80):
            self.compare(S, at_bound=True, with_state=True)

    def test_smaller_chunks(self):
        self.compare(45, at_bound=True, with_state=True, chunk=8)

    def test_refuses_overflowing_chunks(self):
        x = torch.zeros(1, 4, 1, 4)
        with self.assertRaises(ValueError):
            fast_ops.kda_chunk_parallel(x, x, x, x, torch.zeros(1, 4, 1), chunk_size=64)


class LoopExperts(torch.nn.Module if torch is not None else object):
    """The parameter layout and gate of transformers' Glm5NextTextExperts, with its per-expert loop."""

    def __init__(self, E, D, I, limit, gen):
        super().__init__()
        self.gate_up_proj = torch.nn.Parameter(torch.randn(E, 2 * I, D, generator=gen).double() * 0.3)
        self.down_proj = torch.nn.Parameter(torch.randn(E, D, I, generator=gen).double() * 0.3)
        self.swiglu_limit = limit

    def _apply_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        gate = gate.clamp(min=None, max=self.swiglu_limit)
        up = up.clamp(min=-self.swiglu_limit, max=self.swiglu_limit)
        return torch.nn.functional.silu(gate) * up

    def loop(self, x, idx, w):
        out = torch.zeros_like(x)
        for e in range(self.gate_up_proj.shape[0]):
            pos, tok = torch.where(idx.t() == e)
            if len(tok) == 0:
                continue
            h = self._apply_gate(torch.nn.functional.linear(x[tok], self.gate_up_proj[e]))
            h = torch.nn.functional.linear(h, self.down_proj[e]) * w[tok, pos, None]
            out.index_add_(0, tok, h)
        return out


@unittest.skipIf(torch is None, "torch is not installed (apt-get install python3-torch)")
class MoeExpertsDense(unittest.TestCase):
    def test_equals_the_loop(self):
        gen = torch.Generator().manual_seed(7)
        E, D, I, T, k = 6, 10, 4, 23, 2
        ex = LoopExperts(E, D, I, limit=1.5, gen=gen)  # a low clamp so that it bites
        x = torch.randn(T, D, generator=gen).double().requires_grad_(True)
        idx = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
        w = torch.rand(T, k, generator=gen).double().requires_grad_(True)
        ref = ex.loop(x, idx, w)
        gw = torch.randn(ref.shape, generator=gen).double()
        grads_ref = torch.autograd.grad((ref * gw).sum(), [x, w, ex.gate_up_proj, ex.down_proj])
        got = fast_ops.moe_experts_dense(ex, x, idx, w)
        grads = torch.autograd.grad((got * gw).sum(), [x, w, ex.gate_up_proj, ex.down_proj])
        self.assertLess(float((got - ref).abs().max()), 1e-12)
        for a, b in zip(grads, grads_ref):
            self.assertLess(float((a - b).abs().max()), 1e-12)


if __name__ == "__main__":
    unittest.main()
