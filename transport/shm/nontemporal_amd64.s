//go:build amd64 && !purego

#include "textflag.h"

// func streamLines(dst, src unsafe.Pointer, lines uintptr)
//
// Copies lines 64-byte lines from src (any alignment) to dst (16-byte
// aligned) with non-temporal stores, then fences them: the caller
// publishes the message with a store the receiver must not see first.
TEXT ·streamLines(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lines+16(FP), CX
	TESTQ CX, CX
	JZ done
loop:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVNTO X0, 0(DI)
	MOVNTO X1, 16(DI)
	MOVNTO X2, 32(DI)
	MOVNTO X3, 48(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ loop
	SFENCE
done:
	RET
