package main

import (
	"math"
	"math/rand/v2"
)

// model is a multi-layer perceptron: inputs of dim features, hidden
// layers of tanh units, one linear output; its parameters live in one
// flat slice, each layer's weights (out × in, row-major) then its biases.
type model struct {
	sizes  []int       // features, hidden..., 1
	params []float64   // every parameter
	w, b   [][]float64 // per layer: views into params
}

func newModel(dim, hidden, layers int, seed uint64) *model {
	m := &model{sizes: []int{dim}}
	for range layers {
		m.sizes = append(m.sizes, hidden)
	}
	m.sizes = append(m.sizes, 1)
	n := 0
	for l := 1; l < len(m.sizes); l++ {
		n += m.sizes[l]*m.sizes[l-1] + m.sizes[l]
	}
	m.params = make([]float64, n)
	m.w, m.b = m.views(m.params)
	rng := rand.New(rand.NewPCG(seed, 1))
	for l, w := range m.w {
		scale := 1 / math.Sqrt(float64(m.sizes[l]))
		for i := range w {
			w[i] = rng.NormFloat64() * scale
		}
	}
	return m
}

// views cuts flat, laid out as params, into each layer's weights and
// biases.
func (m *model) views(flat []float64) (w, b [][]float64) {
	off := 0
	for l := 1; l < len(m.sizes); l++ {
		in, out := m.sizes[l-1], m.sizes[l]
		w = append(w, flat[off:off+out*in:off+out*in])
		off += out * in
		b = append(b, flat[off:off+out:off+out])
		off += out
	}
	return w, b
}

// backwardOrder is the gradient tensors in the order the backward pass
// completes them: the output layer's weights and biases first.
func (m *model) backwardOrder(gw, gb [][]float64) [][]float64 {
	var ts [][]float64
	for l := len(gw) - 1; l >= 0; l-- {
		ts = append(ts, gw[l], gb[l])
	}
	return ts
}

// work holds the activations of one batch, reused from step to step.
type work struct {
	acts [][]float64 // per layer, n × size: the input, then each layer's output
	d, e []float64   // gradients with respect to a layer's outputs, and its inputs
}

// gradient adds to gw and gb the gradient of the mean squared error over
// a global batch of total samples, for the samples idx of it that this
// rank holds: Σ over idx of ∂(pred-y)²/∂θ / total. Summed over ranks it
// is the batch's gradient. ready(l) is called once layer l's gradient
// (weights and biases) is complete, the output layer first.
func (m *model) gradient(x [][]float64, y []float64, idx []int, total int, gw, gb [][]float64, wk *work, ready func(l int)) {
	n := len(idx)
	L := len(m.w)
	m.forward(x, idx, wk)
	// Backward, a layer at a time.
	d := wk.d[:n]
	for s, i := range idx {
		d[s] = 2 * (wk.acts[L][s] - y[i]) / float64(total)
	}
	for l := L; l >= 1; l-- {
		in, out := m.sizes[l-1], m.sizes[l]
		a := wk.acts[l-1]
		w, g, gbl := m.w[l-1], gw[l-1], gb[l-1]
		for s := range n {
			row := a[s*in : s*in+in]
			for o := range out {
				dv := d[s*out+o]
				gbl[o] += dv
				axpy(dv, row, g[o*in:o*in+in])
			}
		}
		ready(l - 1)
		if l == 1 {
			break
		}
		e := wk.e[:n*in]
		clear(e)
		for s := range n {
			er := e[s*in : s*in+in]
			for o := range out {
				axpy(d[s*out+o], w[o*in:o*in+in], er)
			}
			for i, av := range a[s*in : s*in+in] {
				er[i] *= 1 - av*av // tanh'
			}
		}
		wk.d, wk.e = wk.e, wk.d
		d = wk.d[:n*in]
	}
}

// loss is the mean squared error over every sample.
func (m *model) loss(x [][]float64, y []float64) float64 {
	var sum float64
	var wk work
	L := len(m.w)
	for lo := 0; lo < len(x); lo += 256 {
		idx := make([]int, 0, 256)
		for i := lo; i < min(lo+256, len(x)); i++ {
			idx = append(idx, i)
		}
		m.forward(x, idx, &wk)
		for s, i := range idx {
			d := wk.acts[L][s] - y[i]
			sum += d * d
		}
	}
	return sum / float64(len(x))
}

// forward computes every layer's output for the samples idx into wk.
func (m *model) forward(x [][]float64, idx []int, wk *work) {
	n := len(idx)
	L := len(m.w)
	if len(wk.acts) != L+1 || cap(wk.acts[0]) < n*m.sizes[0] {
		wk.acts = make([][]float64, L+1)
		for l := range wk.acts {
			wk.acts[l] = make([]float64, n*m.sizes[l])
		}
		widest := 0
		for _, s := range m.sizes {
			widest = max(widest, s)
		}
		wk.d, wk.e = make([]float64, n*widest), make([]float64, n*widest)
	}
	for l := range wk.acts {
		wk.acts[l] = wk.acts[l][:n*m.sizes[l]]
	}
	for s, i := range idx {
		copy(wk.acts[0][s*m.sizes[0]:], x[i])
	}
	// Forward.
	for l := 1; l <= L; l++ {
		in, out := m.sizes[l-1], m.sizes[l]
		a, z := wk.acts[l-1], wk.acts[l]
		w, b := m.w[l-1], m.b[l-1]
		for s := range n {
			row := a[s*in : s*in+in]
			for o := range out {
				v := b[o] + dot(w[o*in:o*in+in], row)
				if l < L {
					v = math.Tanh(v)
				}
				z[s*out+o] = v
			}
		}
	}
}

// data is the same synthetic regression set on every rank: y = sin(x·a)
// + cos(x·b)/2 + noise.
func data(n, dim int) ([][]float64, []float64) {
	rng := rand.New(rand.NewPCG(7, 11))
	a, b := make([]float64, dim), make([]float64, dim)
	for k := range a {
		a[k], b[k] = rng.NormFloat64()/math.Sqrt(float64(dim)), rng.NormFloat64()/math.Sqrt(float64(dim))
	}
	x := make([][]float64, n)
	y := make([]float64, n)
	for i := range x {
		x[i] = make([]float64, dim)
		for k := range x[i] {
			x[i][k] = rng.NormFloat64()
		}
		y[i] = math.Sin(dot(x[i], a)) + math.Cos(dot(x[i], b))/2 + 0.01*rng.NormFloat64()
	}
	return x, y
}

func dot(a, b []float64) float64 {
	var s0, s1 float64
	i := 0
	for ; i+1 < len(a); i += 2 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
	}
	if i < len(a) {
		s0 += a[i] * b[i]
	}
	return s0 + s1
}

// axpy adds alpha·x to y.
func axpy(alpha float64, x, y []float64) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}
