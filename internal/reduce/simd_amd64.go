//go:build amd64 && !purego

package reduce

import "github.com/klauspost/cpuid/v2"

func detectCPU() (level, feature) {
	c := cpuid.CPU
	var feats feature
	if c.Supports(cpuid.F16C) {
		feats |= featF16C
	}
	switch {
	case c.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512DQ, cpuid.AVX512VL):
		return levelAVX512, feats
	case c.Supports(cpuid.AVX2):
		return levelAVX2, feats
	}
	return levelSSE2, feats // part of amd64
}
