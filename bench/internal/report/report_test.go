package report

import (
	"reflect"
	"testing"
)

func TestSizeTicks(t *testing.T) {
	var labels []string
	n := 0
	for _, tk := range (sizeTicks{}).Ticks(8, 64<<20) {
		n++
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"8", "64", "512", "4K", "32K", "256K", "2M", "16M"}; !reflect.DeepEqual(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
	if n != 24 { // 2^3 to 2^26
		t.Errorf("%d ticks, want one per power of two from 8 to 64M (24)", n)
	}
	for in, want := range map[int64]string{1: "1", 1000: "1000", 1024: "1K", 1536: "1536", 3 << 20: "3M", 1 << 30: "1G"} {
		if got := sizeLabel(in); got != want {
			t.Errorf("sizeLabel(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestPlainLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range (plainLogTicks{}).Ticks(0.05, 2e6) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"0.1", "1", "10", "100", "1000", "10000", "100000", "1000000", "10000000"}; !reflect.DeepEqual(labels, want) {
		t.Errorf("labels %q, want %q", labels, want)
	}
}

func TestLabel(t *testing.T) {
	r := Result{Meta: Meta{Tool: "collbench", Transport: "shm", Op: "allgather", DType: "int8", Ranks: 4, Version: "v1.2"}}
	if got := r.Label(); got != "collbench shm allgather int8, 4 ranks @v1.2" {
		t.Errorf("label %q", got)
	}
	r.Meta.Label = "mine"
	if r.Label() != "mine" {
		t.Errorf("-label ignored: %q", r.Label())
	}
}
