//go:build amd64 && !purego

#include "textflag.h"

// func sumNF32AVX2(d *byte, ins **byte, k, lo, hi int)
// func sumNF64AVX2(d *byte, ins **byte, k, lo, hi int)
// func prodNF32AVX2(d *byte, ins **byte, k, lo, hi int)
// func prodNF64AVX2(d *byte, ins **byte, k, lo, hi int)
//
// d = ins[0] op (ins[1] op (... op (ins[k-2] op ins[k-1]))) over bytes lo
// to hi (multiples of 256) of every buffer, k >= 2, 256 bytes at a time,
// the partial results in eight vector registers. Each step has the input
// as its first source, as the two-operand kernels (sumF32AVX2, ...) have
// a, so that a NaN operand gives the NaN the two-operand chain gives. d
// may be one of ins: a block's inputs are all loaded before its result
// is stored. NARY writes one, NAME, whose op is the instruction OP.
// LOAD8 loads the 256 bytes at R12 of the buffer at R11 into eight
// vector registers.
#define LOAD8(V0, V1, V2, V3, V4, V5, V6, V7) \
	VMOVUPS (R11)(R12*1), V0; \
	VMOVUPS 32(R11)(R12*1), V1; \
	VMOVUPS 64(R11)(R12*1), V2; \
	VMOVUPS 96(R11)(R12*1), V3; \
	VMOVUPS 128(R11)(R12*1), V4; \
	VMOVUPS 160(R11)(R12*1), V5; \
	VMOVUPS 192(R11)(R12*1), V6; \
	VMOVUPS 224(R11)(R12*1), V7

#define NARY(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-40; \
	MOVQ d+0(FP), DI; \
	MOVQ ins+8(FP), R9; \
	MOVQ k+16(FP), R10; \
	MOVQ lo+24(FP), R12; \
	MOVQ hi+32(FP), R14; \
	DECQ R10; \
	block8:; \
	LEAQ 256(R12), AX; \
	CMPQ AX, R14; \
	JGT done; \
	MOVQ (R9)(R10*8), R11; \
	LOAD8(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7); \
	MOVQ R10, R13; \
	next8:; \
	DECQ R13; \
	JS store8; \
	MOVQ (R9)(R13*8), R11; \
	LOAD8(Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15); \
	OP Y0, Y8, Y0; \
	OP Y1, Y9, Y1; \
	OP Y2, Y10, Y2; \
	OP Y3, Y11, Y3; \
	OP Y4, Y12, Y4; \
	OP Y5, Y13, Y5; \
	OP Y6, Y14, Y6; \
	OP Y7, Y15, Y7; \
	JMP next8; \
	store8:; \
	VMOVUPS Y0, (DI)(R12*1); \
	VMOVUPS Y1, 32(DI)(R12*1); \
	VMOVUPS Y2, 64(DI)(R12*1); \
	VMOVUPS Y3, 96(DI)(R12*1); \
	VMOVUPS Y4, 128(DI)(R12*1); \
	VMOVUPS Y5, 160(DI)(R12*1); \
	VMOVUPS Y6, 192(DI)(R12*1); \
	VMOVUPS Y7, 224(DI)(R12*1); \
	MOVQ AX, R12; \
	JMP block8; \
	done:; \
	VZEROUPPER; \
	RET

NARY(·sumNF32AVX2, VADDPS)

NARY(·sumNF64AVX2, VADDPD)

NARY(·prodNF32AVX2, VMULPS)

NARY(·prodNF64AVX2, VMULPD)
