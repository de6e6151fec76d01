// The toy lab's wrong kernel: the correct one (solution.cu) without the causal mask. Every row
// attends to every key of the chunk, so only the last row, which may see them all, is right.
extern "C" __global__ void toy_attention(const float* q, const float* kCache, const float* vCache,
                                         float* out, int chunkLen, int prefixLen) {
    const int row = blockIdx.x;
    const int h = blockIdx.y;
    const int g = h / GROUP;
    const int d = threadIdx.x;
    const float* qRow = q + ((size_t)row * HQ + h) * DH;
    const int visible = prefixLen + chunkLen;  // should be prefixLen + row + 1
    float m = -INFINITY;
    for (int j = 0; j < visible; ++j) {
        const float* kRow = kCache + ((size_t)j * HKV + g) * DH;
        float s = 0.0f;
        for (int e = 0; e < DH; ++e) s += qRow[e] * kRow[e];
        m = fmaxf(m, s * 0.125f);
    }
    float l = 0.0f, acc = 0.0f;
    for (int j = 0; j < visible; ++j) {
        const float* kRow = kCache + ((size_t)j * HKV + g) * DH;
        float s = 0.0f;
        for (int e = 0; e < DH; ++e) s += qRow[e] * kRow[e];
        const float p = expf(s * 0.125f - m);
        l += p;
        acc += p * vCache[((size_t)j * HKV + g) * DH + d];
    }
    out[((size_t)row * HQ + h) * DH + d] = acc / l;
}
