"""model.py - the Muse-Glimmer text decoder and its DFlash drafter in PyTorch, written from
shared/spec/text-model.md section 5 and shared/spec/dflash.md section 3 (development only).

Parameters are kept in GGUF form so the export is a plain copy: norm weights are the multipliers
themselves (the HF "+1" is already folded), RoPE on the target is NORM mode (adjacent pairs) on
the sliding-window layers only, the full layers are NoPE; the drafter uses NeoX RoPE.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope_tables(pos, head_dim, base):
    """cos/sin [T, head_dim/2] for integer positions pos [T]."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope_norm(x, cos, sin):
    """NORM (GPT-J) rope: pairs (x[2i], x[2i+1]). x [..., T, H, D]; cos/sin [T, D/2]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def rope_neox(x, cos, sin):
    """NeoX rope: pairs (x[i], x[i + D/2]). x [..., T, H, D]; cos/sin [T, D/2] (or broadcastable)."""
    h = x.shape[-1] // 2
    x0, x1 = x[..., :h], x[..., h:]
    c, s = cos[..., None, :], sin[..., None, :]
    return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)


class Layer(nn.Module):
    def __init__(self, hp):
        super().__init__()
        D, H, KV, hd, ff = hp["n_embd"], hp["n_head"], hp["n_head_kv"], hp["head_dim"], hp["n_ff"]
        self.attn_norm = nn.Parameter(torch.ones(D))
        self.attn_q = nn.Linear(D, H * hd, bias=False)
        self.attn_k = nn.Linear(D, KV * hd, bias=False)
        self.attn_v = nn.Linear(D, KV * hd, bias=False)
        self.attn_gate = nn.Linear(D, H * hd, bias=False)
        self.attn_output = nn.Linear(H * hd, D, bias=False)
        self.attn_q_norm = nn.Parameter(torch.full((hd,), hp["qk_scale"]))
        self.attn_k_norm = nn.Parameter(torch.ones(hd))
        self.post_attention_norm = nn.Parameter(torch.ones(D))
        self.ffn_norm = nn.Parameter(torch.ones(D))
        self.ffn_gate = nn.Linear(D, ff, bias=False)
        self.ffn_up = nn.Linear(D, ff, bias=False)
        self.ffn_down = nn.Linear(ff, D, bias=False)
        self.post_ffw_norm = nn.Parameter(torch.ones(D))


class MuseGlimmer(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.hp = hp
        D, V = hp["n_embd"], hp["n_vocab"]
        self.token_embd = nn.Embedding(V, D)
        self.layers = nn.ModuleList([Layer(hp) for _ in range(hp["n_layer"])])
        self.output_norm = nn.Parameter(torch.ones(D))
        self.output = nn.Linear(D, V, bias=False)
        self.reset()

    def reset(self):
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std)
        nn.init.normal_(self.token_embd.weight, 0.0, 1.0)

    def masks(self, T, device):
        i = torch.arange(T, device=device)
        causal = i[None, :] <= i[:, None]
        swa = causal & ((i[:, None] - i[None, :]) < self.hp["n_swa"])
        return causal, swa

    def forward(self, tok, capture=None):
        """tok [B, T] -> logits [B, T, V]. capture: list of layer ids whose INPUT residual is
        returned too (concatenated in that order) as the second result."""
        hp = self.hp
        B, T = tok.shape
        H, KV, hd = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
        eps, peps = hp["eps"], hp["post_eps"]
        cos, sin = rope_tables(torch.arange(T), hd, hp["rope_base"])
        causal, swa_mask = self.masks(T, tok.device)
        x = rms(self.token_embd(tok), eps)
        feats = {}
        for il, L in enumerate(self.layers):
            if capture is not None and il in capture:
                feats[il] = x
            swa = hp["swa_pattern"][il]
            h = rms(x, eps) * L.attn_norm
            q = L.attn_q(h).view(B, T, H, hd)
            k = L.attn_k(h).view(B, T, KV, hd)
            v = L.attn_v(h).view(B, T, KV, hd)
            g = L.attn_gate(h)
            q = rms(q, eps) * L.attn_q_norm
            k = rms(k, eps) * L.attn_k_norm
            if swa:
                q, k = rope_norm(q, cos, sin), rope_norm(k, cos, sin)
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                attn_mask=swa_mask if swa else causal, scale=1.0 / math.sqrt(hd), enable_gqa=True)
            a = a.transpose(1, 2).reshape(B, T, H * hd) * torch.sigmoid(g)
            a = rms(L.attn_output(a), peps) * L.post_attention_norm
            x = x + a
            h = rms(x, eps) * L.ffn_norm
            f = L.ffn_down(F.silu(L.ffn_gate(h)) * L.ffn_up(h))
            x = x + rms(f, peps) * L.post_ffw_norm
        if capture is not None and len(self.layers) in capture:
            feats[len(self.layers)] = x
        logits = self.head(x)
        if capture is None:
            return logits
        return logits, torch.cat([feats[i] for i in capture], dim=-1)

    def head(self, x):
        hp = self.hp
        y = self.output(rms(x, hp["eps"]) * self.output_norm) * hp["logit_scale"]
        c = hp["softcap"]
        return c * torch.tanh(y / c)

    # ---- KV-cached greedy decoding (for distillation data and acceptance runs) ----------------

    @torch.no_grad()
    def generate(self, tok, n_new, capture):
        """Greedy-continue tok [B, T0] by n_new tokens. Returns (seq [B, T0+n_new], feats
        [B, T0+n_new-1, F]): the features of every position that was forwarded (the last
        generated token is not forwarded)."""
        hp = self.hp
        B, T0 = tok.shape
        H, KV, hd = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
        eps, peps = hp["eps"], hp["post_eps"]
        Tmax = T0 + n_new
        cos_all, sin_all = rope_tables(torch.arange(Tmax), hd, hp["rope_base"])
        Kc = [torch.zeros(B, KV, Tmax, hd) for _ in self.layers]
        Vc = [torch.zeros(B, KV, Tmax, hd) for _ in self.layers]
        seq = torch.zeros(B, Tmax, dtype=torch.long)
        seq[:, :T0] = tok
        all_feats = []
        pos0, cur = 0, tok
        for step in range(n_new):
            T = cur.shape[1]
            pos = torch.arange(pos0, pos0 + T)
            cos, sin = cos_all[pos], sin_all[pos]
            kp = torch.arange(pos0 + T)
            causal = kp[None, :] <= pos[:, None]
            swa_mask = causal & ((pos[:, None] - kp[None, :]) < hp["n_swa"])
            x = rms(self.token_embd(cur), eps)
            feats = []
            for il, L in enumerate(self.layers):
                if il in capture:
                    feats.append(x)
                swa = hp["swa_pattern"][il]
                h = rms(x, eps) * L.attn_norm
                q = L.attn_q(h).view(B, T, H, hd)
                k = L.attn_k(h).view(B, T, KV, hd)
                v = L.attn_v(h).view(B, T, KV, hd)
                g = L.attn_gate(h)
                q = rms(q, eps) * L.attn_q_norm
                k = rms(k, eps) * L.attn_k_norm
                if swa:
                    q, k = rope_norm(q, cos, sin), rope_norm(k, cos, sin)
                Kc[il][:, :, pos0:pos0 + T] = k.transpose(1, 2)
                Vc[il][:, :, pos0:pos0 + T] = v.transpose(1, 2)
                a = F.scaled_dot_product_attention(
                    q.transpose(1, 2), Kc[il][:, :, :pos0 + T], Vc[il][:, :, :pos0 + T],
                    attn_mask=swa_mask if swa else causal, scale=1.0 / math.sqrt(hd), enable_gqa=True)
                a = a.transpose(1, 2).reshape(B, T, H * hd) * torch.sigmoid(g)
                x = x + rms(L.attn_output(a), peps) * L.post_attention_norm
                h = rms(x, eps) * L.ffn_norm
                x = x + rms(L.ffn_down(F.silu(L.ffn_gate(h)) * L.ffn_up(h)), peps) * L.post_ffw_norm
            if feats:
                all_feats.append(torch.cat(feats, dim=-1))
            nxt = self.head(x[:, -1]).argmax(-1)
            seq[:, pos0 + T] = nxt
            pos0 += T
            cur = nxt[:, None]
        return seq, (torch.cat(all_feats, dim=1) if all_feats else None)


# ---- DFlash drafter ---------------------------------------------------------------------------

class DraftLayer(nn.Module):
    def __init__(self, D, dhp):
        super().__init__()
        H, KV, hd, ff = dhp["n_head"], dhp["n_head_kv"], dhp["head_dim"], dhp["n_ff"]
        self.attn_norm = nn.Parameter(torch.ones(D))
        self.attn_q = nn.Linear(D, H * hd, bias=False)
        self.attn_k = nn.Linear(D, KV * hd, bias=False)
        self.attn_v = nn.Linear(D, KV * hd, bias=False)
        self.attn_output = nn.Linear(H * hd, D, bias=False)
        self.attn_q_norm = nn.Parameter(torch.ones(hd))
        self.attn_k_norm = nn.Parameter(torch.ones(hd))
        self.ffn_norm = nn.Parameter(torch.ones(D))
        self.ffn_gate = nn.Linear(D, ff, bias=False)
        self.ffn_up = nn.Linear(D, ff, bias=False)
        self.ffn_down = nn.Linear(ff, D, bias=False)


class Drafter(nn.Module):
    """dflash.md section 3: encode (fc + enc norm), inject (context K/V per layer, NeoX rope at
    the feature's position), draft a block [anchor, MASK x (b-1)] non-causally over the context
    keys with position < P (and inside the window) plus the block's own keys; final norm; the
    target's raw LM head (no logit scale, no softcap)."""

    def __init__(self, D, dhp):
        super().__init__()
        self.D, self.dhp = D, dhp
        self.fc = nn.Linear(len(dhp["target_layers"]) * D, D, bias=False)
        self.enc_norm = nn.Parameter(torch.ones(D))
        self.layers = nn.ModuleList([DraftLayer(D, dhp) for _ in range(dhp["n_layer"])])
        self.output_norm = nn.Parameter(torch.ones(D))
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, feats, anchors_tok, P, embd, head_w):
        """feats [B, T, F] (features of positions 0..T-1); anchors_tok [B, n]; P [B, n] the
        anchors' positions (context = positions < P); embd / head_w: the target's token_embd and
        output weights [V, D]. Returns raw logits [B, n, b, V]."""
        d = self.dhp
        B, T, _ = feats.shape
        n = P.shape[1]
        b, H, KV, hd, eps, W = d["block_size"], d["n_head"], d["n_head_kv"], d["head_dim"], d["eps"], d["n_swa"]
        g = rms(self.fc(feats), eps) * self.enc_norm  # [B, T, D]
        ccos, csin = rope_tables(torch.arange(T), hd, d["rope_base"])
        bpos = P[:, :, None] + torch.arange(b)[None, None, :]  # [B, n, b]
        bcos, bsin = rope_tables(bpos.reshape(-1), hd, d["rope_base"])
        bcos, bsin = bcos.view(B, n * b, hd // 2), bsin.view(B, n * b, hd // 2)
        # mask [B, n*b, T + n*b]
        kp = torch.arange(T)
        qp = bpos.reshape(B, n * b)
        Pq = P[:, :, None].expand(B, n, b).reshape(B, n * b)
        ctx_ok = (kp[None, None, :] < Pq[:, :, None]) & ((qp[:, :, None] - kp[None, None, :]) < W)
        blk = torch.arange(n * b) // b
        blk_ok = (blk[:, None] == blk[None, :]).expand(B, n * b, n * b)
        mask = torch.cat([ctx_ok, blk_ok], dim=-1)[:, None]  # [B, 1, nb, T+nb]
        ids = torch.full((B, n, b), 0, dtype=torch.long)
        h = embd[ids.reshape(B, n * b)].clone()
        h[:, 0::b] = embd[anchors_tok]
        h[:, [i for i in range(n * b) if i % b]] = embd[common.MASK]
        for L in self.layers:
            ck = rope_neox(rms(L.attn_k(g).view(B, T, KV, hd), eps) * L.attn_k_norm, ccos, csin)
            cv = L.attn_v(g).view(B, T, KV, hd)
            x = rms(h, eps) * L.attn_norm
            q = rms(L.attn_q(x).view(B, n * b, H, hd), eps) * L.attn_q_norm
            k = rms(L.attn_k(x).view(B, n * b, KV, hd), eps) * L.attn_k_norm
            v = L.attn_v(x).view(B, n * b, KV, hd)
            q, k = rope_neox(q, bcos, bsin), rope_neox(k, bcos, bsin)
            K = torch.cat([ck, k], dim=1).transpose(1, 2)
            V = torch.cat([cv, v], dim=1).transpose(1, 2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), K, V, attn_mask=mask,
                                               scale=1.0 / math.sqrt(hd), enable_gqa=True)
            h = h + L.attn_output(a.transpose(1, 2).reshape(B, n * b, H * hd))
            y = rms(h, eps) * L.ffn_norm
            h = h + L.ffn_down(F.silu(L.ffn_gate(y)) * L.ffn_up(y))
        y = rms(h, eps) * self.output_norm
        return (y @ head_w.t()).view(B, n, b, -1)
