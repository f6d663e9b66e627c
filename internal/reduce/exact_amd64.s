//go:build amd64 && !purego

#include "textflag.h"

// func exactAccF32AVX2(s *float64, mx, mn *uint32, x *float32, n int)
//
// For i < n (a multiple of 4): s[i] += float64(x[i]); with a = the bits
// of |x[i]|, mx[i] = max(mx[i], a) and mn[i] = min(mn[i], a-1), unsigned
// (exact.go, exactF32).
TEXT ·exactAccF32AVX2(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), DI
	MOVQ mx+8(FP), SI
	MOVQ mn+16(FP), DX
	MOVQ x+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ $0x7fffffff, AX
	MOVQ AX, X8
	VPBROADCASTD X8, X8
	MOVQ $1, AX
	MOVQ AX, X9
	VPBROADCASTD X9, X9

loop:
	CMPQ CX, $4
	JLT  done
	VMOVUPS   (BX), X0
	VCVTPS2PD X0, Y1
	VADDPD    (DI), Y1, Y1
	VMOVUPD   Y1, (DI)
	VPAND     X8, X0, X2
	VPMAXUD   (SI), X2, X3
	VMOVDQU   X3, (SI)
	VPSUBD    X9, X2, X4
	VPMINUD   (DX), X4, X5
	VMOVDQU   X5, (DX)
	ADDQ      $16, BX
	ADDQ      $32, DI
	ADDQ      $16, SI
	ADDQ      $16, DX
	SUBQ      $4, CX
	JMP       loop

done:
	VZEROUPPER
	RET
