//go:build amd64 && !purego

#include "textflag.h"

// func relax(n uint32)
TEXT ·relax(SB), NOSPLIT, $0-4
	MOVL n+0(FP), AX
again:
	PAUSE
	SUBL $1, AX
	JNZ again
	RET
