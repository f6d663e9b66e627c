package reduce

import (
	"errors"
	"strings"
	"testing"
)

var (
	allDTypes = []DType{Float32, Float64, Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64, Float16, BFloat16}
	allOps    = []Op{Sum, Prod, Min, Max, Avg}
)

func TestDTypeProperties(t *testing.T) {
	tests := []struct {
		dt    DType
		name  string
		size  int
		valid bool
		float bool
	}{
		{Float32, "float32", 4, true, true},
		{Float64, "float64", 8, true, true},
		{Int8, "int8", 1, true, false},
		{Int16, "int16", 2, true, false},
		{Int32, "int32", 4, true, false},
		{Int64, "int64", 8, true, false},
		{Uint8, "uint8", 1, true, false},
		{Uint16, "uint16", 2, true, false},
		{Uint32, "uint32", 4, true, false},
		{Uint64, "uint64", 8, true, false},
		{Float16, "float16", 2, true, true},
		{BFloat16, "bfloat16", 2, true, true},
		{0, "dtype(0)", 0, false, false},
		{13, "dtype(13)", 0, false, false},
		{255, "dtype(255)", 0, false, false},
	}
	for _, tc := range tests {
		if got := tc.dt.String(); got != tc.name {
			t.Errorf("DType(%d).String() = %q, want %q", uint8(tc.dt), got, tc.name)
		}
		if got := tc.dt.Size(); got != tc.size {
			t.Errorf("%v.Size() = %d, want %d", tc.dt, got, tc.size)
		}
		if got := tc.dt.Valid(); got != tc.valid {
			t.Errorf("%v.Valid() = %v, want %v", tc.dt, got, tc.valid)
		}
		if got := tc.dt.IsFloat(); got != tc.float {
			t.Errorf("%v.IsFloat() = %v, want %v", tc.dt, got, tc.float)
		}
	}
	// The constants are part of the wire/API contract.
	if Float32 != 1 || BFloat16 != 12 {
		t.Errorf("DType constants moved: Float32=%d BFloat16=%d", Float32, BFloat16)
	}
}

func TestOpProperties(t *testing.T) {
	tests := []struct {
		op    Op
		name  string
		valid bool
	}{
		{Sum, "sum", true},
		{Prod, "prod", true},
		{Min, "min", true},
		{Max, "max", true},
		{Avg, "avg", true},
		{0, "op(0)", false},
		{ExactSum, "exactsum", true},
		{7, "op(7)", false},
		{200, "op(200)", false},
	}
	for _, tc := range tests {
		if got := tc.op.String(); got != tc.name {
			t.Errorf("Op(%d).String() = %q, want %q", uint8(tc.op), got, tc.name)
		}
		if got := tc.op.Valid(); got != tc.valid {
			t.Errorf("%v.Valid() = %v, want %v", tc.op, got, tc.valid)
		}
	}
	if Sum != 1 || Avg != 5 || ExactSum != 6 {
		t.Errorf("Op constants moved: Sum=%d Avg=%d ExactSum=%d", Sum, Avg, ExactSum)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		dt      DType
		op      Op
		ok      bool
		mention []string // substrings the error message must contain
	}{
		{Float32, Sum, true, nil},
		{Float32, Avg, true, nil},
		{Float64, Prod, true, nil},
		{Float16, Avg, true, nil},
		{BFloat16, Avg, true, nil},
		{BFloat16, Min, true, nil},
		{Int8, Sum, true, nil},
		{Int32, Max, true, nil},
		{Uint64, Prod, true, nil},
		{Int32, Avg, false, []string{"avg", "int32", "use sum and divide"}},
		{Int8, Avg, false, []string{"avg", "int8"}},
		{Uint16, Avg, false, []string{"avg", "uint16"}},
		{Uint64, Avg, false, []string{"avg", "uint64"}},
		{0, Sum, false, []string{"dtype(0)", "sum"}},
		{13, Max, false, []string{"dtype(13)", "max"}},
		{Float32, 0, false, []string{"op(0)", "float32"}},
		{Int64, 9, false, []string{"op(9)", "int64"}},
		{0, 0, false, []string{"dtype(0)"}},
	}
	for _, tc := range tests {
		err := Check(tc.dt, tc.op)
		if tc.ok {
			if err != nil {
				t.Errorf("Check(%v, %v) = %v, want nil", tc.dt, tc.op, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("Check(%v, %v) = nil, want error", tc.dt, tc.op)
			continue
		}
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("Check(%v, %v) = %v, does not wrap ErrUnsupported", tc.dt, tc.op, err)
		}
		for _, s := range tc.mention {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Check(%v, %v) = %q, want it to mention %q", tc.dt, tc.op, err, s)
			}
		}
	}
	if got, want := Check(Int32, Avg).Error(), "reduce: avg is not defined for int32 (use sum and divide)"; got != want {
		t.Errorf("Check(int32, avg) message = %q, want %q", got, want)
	}

	// Exhaustive over the valid pairs: only Avg on integers is rejected.
	for _, dt := range allDTypes {
		for _, op := range allOps {
			err := Check(dt, op)
			if want := op == Avg && !dt.IsFloat(); (err != nil) != want {
				t.Errorf("Check(%v, %v) = %v, want error: %v", dt, op, err, want)
			}
		}
	}
}
