//go:build amd64 && !purego

#include "textflag.h"

// func sumNF32AVX2(d *byte, ins **byte, k, lo, hi int)
//
// d = ins[0] + (ins[1] + (... + (ins[k-2] + ins[k-1]))) over bytes lo to
// hi (multiples of 32) of every buffer, k >= 2, the partial sums in
// registers: 256 bytes at a time while they fit, then 32. Each addition
// has the input as its first source, as sumF32AVX2 has a, so that a NaN
// operand gives the NaN the two-operand chain gives. d may be one of ins:
// a block's inputs are all loaded before its result is stored.
TEXT ·sumNF32AVX2(SB), NOSPLIT, $0-40
	MOVQ d+0(FP), DI
	MOVQ ins+8(FP), R9
	MOVQ k+16(FP), R10
	MOVQ lo+24(FP), R12
	MOVQ hi+32(FP), R14
	DECQ R10

block8:
	LEAQ    256(R12), AX
	CMPQ    AX, R14
	JGT     block1
	MOVQ    (R9)(R10*8), R11
	VMOVUPS (R11)(R12*1), Y0
	VMOVUPS 32(R11)(R12*1), Y1
	VMOVUPS 64(R11)(R12*1), Y2
	VMOVUPS 96(R11)(R12*1), Y3
	VMOVUPS 128(R11)(R12*1), Y4
	VMOVUPS 160(R11)(R12*1), Y5
	VMOVUPS 192(R11)(R12*1), Y6
	VMOVUPS 224(R11)(R12*1), Y7
	MOVQ    R10, R13

next8:
	DECQ    R13
	JS      store8
	MOVQ    (R9)(R13*8), R11
	VMOVUPS (R11)(R12*1), Y8
	VMOVUPS 32(R11)(R12*1), Y9
	VMOVUPS 64(R11)(R12*1), Y10
	VMOVUPS 96(R11)(R12*1), Y11
	VADDPS  Y0, Y8, Y0
	VADDPS  Y1, Y9, Y1
	VADDPS  Y2, Y10, Y2
	VADDPS  Y3, Y11, Y3
	VMOVUPS 128(R11)(R12*1), Y12
	VMOVUPS 160(R11)(R12*1), Y13
	VMOVUPS 192(R11)(R12*1), Y14
	VMOVUPS 224(R11)(R12*1), Y15
	VADDPS  Y4, Y12, Y4
	VADDPS  Y5, Y13, Y5
	VADDPS  Y6, Y14, Y6
	VADDPS  Y7, Y15, Y7
	JMP     next8

store8:
	VMOVUPS Y0, (DI)(R12*1)
	VMOVUPS Y1, 32(DI)(R12*1)
	VMOVUPS Y2, 64(DI)(R12*1)
	VMOVUPS Y3, 96(DI)(R12*1)
	VMOVUPS Y4, 128(DI)(R12*1)
	VMOVUPS Y5, 160(DI)(R12*1)
	VMOVUPS Y6, 192(DI)(R12*1)
	VMOVUPS Y7, 224(DI)(R12*1)
	MOVQ    AX, R12
	JMP     block8

block1:
	LEAQ    32(R12), AX
	CMPQ    AX, R14
	JGT     done
	MOVQ    (R9)(R10*8), R11
	VMOVUPS (R11)(R12*1), Y0
	MOVQ    R10, R13

next1:
	DECQ    R13
	JS      store1
	MOVQ    (R9)(R13*8), R11
	VMOVUPS (R11)(R12*1), Y8
	VADDPS  Y0, Y8, Y0
	JMP     next1

store1:
	VMOVUPS Y0, (DI)(R12*1)
	MOVQ    AX, R12
	JMP     block1

done:
	VZEROUPPER
	RET

// func sumNF64AVX2(d *byte, ins **byte, k, lo, hi int): the same in float64.
TEXT ·sumNF64AVX2(SB), NOSPLIT, $0-40
	MOVQ d+0(FP), DI
	MOVQ ins+8(FP), R9
	MOVQ k+16(FP), R10
	MOVQ lo+24(FP), R12
	MOVQ hi+32(FP), R14
	DECQ R10

block8:
	LEAQ    256(R12), AX
	CMPQ    AX, R14
	JGT     block1
	MOVQ    (R9)(R10*8), R11
	VMOVUPS (R11)(R12*1), Y0
	VMOVUPS 32(R11)(R12*1), Y1
	VMOVUPS 64(R11)(R12*1), Y2
	VMOVUPS 96(R11)(R12*1), Y3
	VMOVUPS 128(R11)(R12*1), Y4
	VMOVUPS 160(R11)(R12*1), Y5
	VMOVUPS 192(R11)(R12*1), Y6
	VMOVUPS 224(R11)(R12*1), Y7
	MOVQ    R10, R13

next8:
	DECQ    R13
	JS      store8
	MOVQ    (R9)(R13*8), R11
	VMOVUPS (R11)(R12*1), Y8
	VMOVUPS 32(R11)(R12*1), Y9
	VMOVUPS 64(R11)(R12*1), Y10
	VMOVUPS 96(R11)(R12*1), Y11
	VADDPD  Y0, Y8, Y0
	VADDPD  Y1, Y9, Y1
	VADDPD  Y2, Y10, Y2
	VADDPD  Y3, Y11, Y3
	VMOVUPS 128(R11)(R12*1), Y12
	VMOVUPS 160(R11)(R12*1), Y13
	VMOVUPS 192(R11)(R12*1), Y14
	VMOVUPS 224(R11)(R12*1), Y15
	VADDPD  Y4, Y12, Y4
	VADDPD  Y5, Y13, Y5
	VADDPD  Y6, Y14, Y6
	VADDPD  Y7, Y15, Y7
	JMP     next8

store8:
	VMOVUPS Y0, (DI)(R12*1)
	VMOVUPS Y1, 32(DI)(R12*1)
	VMOVUPS Y2, 64(DI)(R12*1)
	VMOVUPS Y3, 96(DI)(R12*1)
	VMOVUPS Y4, 128(DI)(R12*1)
	VMOVUPS Y5, 160(DI)(R12*1)
	VMOVUPS Y6, 192(DI)(R12*1)
	VMOVUPS Y7, 224(DI)(R12*1)
	MOVQ    AX, R12
	JMP     block8

block1:
	LEAQ    32(R12), AX
	CMPQ    AX, R14
	JGT     done
	MOVQ    (R9)(R10*8), R11
	VMOVUPS (R11)(R12*1), Y0
	MOVQ    R10, R13

next1:
	DECQ    R13
	JS      store1
	MOVQ    (R9)(R13*8), R11
	VMOVUPS (R11)(R12*1), Y8
	VADDPD  Y0, Y8, Y0
	JMP     next1

store1:
	VMOVUPS Y0, (DI)(R12*1)
	MOVQ    AX, R12
	JMP     block1

done:
	VZEROUPPER
	RET
