//go:build amd64 && !purego

#include "textflag.h"

// func exactF32AVX2(out *float32, ins **float32, n, lo, hi int, w int32) int
//
// exactF32's fast path, eight elements at a time from element lo, with
// the state in registers: for each group, over the n inputs ins[q], the
// float64 sum s (two vectors of four) and, of a = the bits of |x|, the
// unsigned max (mx) and the min of a-1 (mn). A group whose every element
// is in the window (exponent span emax - emin at most w; exact.go) or
// has an Inf or NaN input has its results stored to out; the first group
// that does not, or a group that would pass hi, stops it: it returns
// that group's first element, with out left unwritten from there on.
TEXT ·exactF32AVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ ins+8(FP), R9
	MOVQ n+16(FP), R10
	MOVQ lo+24(FP), R12
	MOVQ hi+32(FP), R14
	MOVL w+40(FP), AX
	MOVQ AX, X12
	VPBROADCASTD X12, Y12
	MOVL $0x7fffffff, AX
	MOVQ AX, X8
	VPBROADCASTD X8, Y8
	MOVL $1, AX
	MOVQ AX, X9
	VPBROADCASTD X9, Y9
	MOVL $255, AX
	MOVQ AX, X10
	VPBROADCASTD X10, Y10
	MOVQ $0x8000000000000000, AX
	MOVQ AX, X11
	VPBROADCASTQ X11, Y11
	VPCMPEQD Y13, Y13, Y13
	MOVL $0x7fc00000, AX
	MOVQ AX, X14
	VPBROADCASTD X14, Y14

group:
	LEAQ 8(R12), AX
	CMPQ AX, R14
	JGT  done
	VMOVAPD Y11, Y0
	VMOVAPD Y11, Y1
	VPXOR   Y2, Y2, Y2
	VMOVDQA Y13, Y3
	XORQ    R13, R13

input:
	MOVQ         (R9)(R13*8), R11
	VMOVUPS      (R11)(R12*4), Y4
	VPAND        Y8, Y4, Y5
	VPMAXUD      Y5, Y2, Y2
	VPSUBD       Y9, Y5, Y5
	VPMINUD      Y5, Y3, Y3
	VCVTPS2PD    X4, Y6
	VADDPD       Y6, Y0, Y0
	VEXTRACTF128 $1, Y4, X7
	VCVTPS2PD    X7, Y7
	VADDPD       Y7, Y1, Y1
	INCQ         R13
	CMPQ         R13, R10
	JLT          input

	// emax = mx >> 23; emin = max((mn+1) >> 23, 1), or 255 where every
	// input was zero (mn all ones); flagged: emax - emin > w with emax
	// below 255. An element with an Inf or NaN input (emax 255) is s,
	// whose float64 sum of finite inputs cannot overflow: NaN for a NaN
	// or both infinities, stored as the canonical NaN, else the Inf.
	VPSRLD    $23, Y2, Y2
	VPCMPEQD  Y13, Y3, Y5
	VPADDD    Y9, Y3, Y3
	VPSRLD    $23, Y3, Y3
	VPMAXSD   Y9, Y3, Y3
	VBLENDVPS Y5, Y10, Y3, Y3
	VPSUBD    Y3, Y2, Y6
	VPCMPGTD  Y12, Y6, Y6
	VPCMPEQD  Y10, Y2, Y7
	VPANDN    Y6, Y7, Y6
	VMOVMSKPS Y6, AX
	TESTL     AX, AX
	JNZ       done

	VCVTPD2PSY  Y0, X0
	VCVTPD2PSY  Y1, X1
	VINSERTF128 $1, X1, Y0, Y0
	VCMPPS      $3, Y0, Y0, Y5
	VBLENDVPS   Y5, Y14, Y0, Y0
	VMOVUPS     Y0, (DI)(R12*4)
	ADDQ        $8, R12
	JMP         group

done:
	VZEROUPPER
	MOVQ R12, ret+48(FP)
	RET
