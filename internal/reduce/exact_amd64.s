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

// func exactFinishF32AVX2(out *float32, s *float64, mx, mn *uint32, n int, w int32, flags *uint8) uint32
//
// For i < n (a multiple of 4): out[i] = float32(s[i]), and bit i%4 of
// flags[i/4] set where the element is outside the fast path (exponent
// 255, or a span emax - emin over w; exact.go, exactF32). Returns the OR
// of the flags.
TEXT ·exactFinishF32AVX2(SB), NOSPLIT, $0-60
	MOVQ out+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ mx+16(FP), R8
	MOVQ mn+24(FP), R9
	MOVQ n+32(FP), CX
	MOVL w+40(FP), AX
	MOVQ AX, X12
	VPBROADCASTD X12, X12
	MOVQ flags+48(FP), R10
	MOVQ $255, AX
	MOVQ AX, X10
	VPBROADCASTD X10, X10
	MOVQ $1, AX
	MOVQ AX, X11
	VPBROADCASTD X11, X11
	VPCMPEQD X13, X13, X13
	XORL BX, BX

floop:
	CMPQ CX, $4
	JLT  fdone
	VMOVUPD    (SI), Y0
	VCVTPD2PSY Y0, X0
	VMOVUPS    X0, (DI)
	VMOVDQU    (R8), X1
	VPSRLD     $23, X1, X1
	VMOVDQU    (R9), X2
	VPCMPEQD   X13, X2, X3
	VPADDD     X11, X2, X4
	VPSRLD     $23, X4, X4
	VPMAXSD    X11, X4, X4
	VBLENDVPS  X3, X10, X4, X4
	VPSUBD     X4, X1, X5
	VPCMPGTD   X12, X5, X6
	VPCMPEQD   X10, X1, X7
	VPOR       X7, X6, X6
	VMOVMSKPS  X6, AX
	MOVB       AX, (R10)
	ORL        AX, BX
	ADDQ       $16, DI
	ADDQ       $32, SI
	ADDQ       $16, R8
	ADDQ       $16, R9
	ADDQ       $1, R10
	SUBQ       $4, CX
	JMP        floop

fdone:
	VZEROUPPER
	MOVL BX, ret+56(FP)
	RET
