# SDPA at the shapes of a 20 Questions evaluation (40 rows, 9 query heads over 3 KV heads): transformers' repeat_kv copy vs enable_gqa vs the packed decode query.
# Usage: [ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2] python benchmarks/sdpa_gqa_micro.py
import torch, time
from transformers.integrations.sdpa_attention import repeat_kv
torch.manual_seed(0)
F=torch.nn.functional.scaled_dot_product_attention
def bench(fn, n=30):
    fn(); t=time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter()-t)/n*1000
for B,q,L in [(40,1,800),(40,15,815),(40,1,300),(8,300,300)]:
    Q=torch.randn(B,9,q,64); K=torch.randn(B,3,L,64); V=torch.randn(B,3,L,64)
    m=torch.ones(B,1,q,L,dtype=torch.bool); m[0,...,:100]=False
    rep=lambda: F(Q,repeat_kv(K,3),repeat_kv(V,3),attn_mask=m)
    gqa=lambda: F(Q,K,V,attn_mask=m,enable_gqa=True)
    packed=(lambda: F(Q.reshape(B,3,3,64),K,V,attn_mask=m)) if q==1 else None
    print(B,q,L,'repeat %.2f ms'%bench(rep),'gqa %.2f ms'%bench(gqa), ('packed %.2f'%bench(packed)) if packed else '')
