package plan

import (
	"errors"
	"testing"

	"github.com/gocoll/gocoll/collectives"
)

// TestEncodeDecode: a plan survives the store's form, and a form this
// build cannot read is ErrBadPlan.
func TestEncodeDecode(t *testing.T) {
	p := Plan{Algos: "allreduce=ring", HalfAccum: "16bit", Transport: "auto", Elastic: true,
		TCPConnect: "warm", RDMAConnect: "lazy", StepCostly: true, MaxMessage: 262144}
	q, err := Decode(p.Encode())
	if err != nil || q != p || q.Fingerprint() != p.Fingerprint() {
		t.Fatalf("Decode(Encode(%+v)) = %+v, %v", p, q, err)
	}
	for _, bad := range []string{"", "GOCOLL_ALGO=\n", p.Encode() + "extra=1\n", "garbage",
		p.Settings().Encode()[:20], "GOCOLL_ALGO=allreduce=teleport\nGOCOLL_HALF_ACCUM=x\nGOCOLL_TRANSPORT=auto\nGOCOLL_ELASTIC=true\nGOCOLL_TCP_CONNECT=lazy\nGOCOLL_RDMA_CONNECT=lazy\nstep cost=false\nmessage size=1\n"} {
		if _, err := Decode(bad); !errors.Is(err, ErrBadPlan) {
			t.Errorf("Decode(%q) = %v, want ErrBadPlan", bad, err)
		}
	}
}

// TestDiff names the first setting that differs, with both values.
func TestDiff(t *testing.T) {
	a := Plan{Algos: "", HalfAccum: "float32", Transport: "auto", TCPConnect: "lazy", RDMAConnect: "lazy"}
	cases := []struct {
		change func(p *Plan)
		name   string
	}{
		{func(p *Plan) { p.Algos = "allreduce=rd" }, "GOCOLL_ALGO"},
		{func(p *Plan) { p.HalfAccum = "16bit" }, "GOCOLL_HALF_ACCUM"},
		{func(p *Plan) { p.Transport = "tcp" }, "GOCOLL_TRANSPORT"},
		{func(p *Plan) { p.Elastic = true }, "GOCOLL_ELASTIC"},
		{func(p *Plan) { p.TCPConnect = "eager" }, "GOCOLL_TCP_CONNECT"},
		{func(p *Plan) { p.RDMAConnect = "eager" }, "GOCOLL_RDMA_CONNECT"},
		{func(p *Plan) { p.StepCostly = true }, "step cost"},
	}
	for _, tc := range cases {
		b := a
		tc.change(&b)
		if name, av, bv, differ := a.Diff(b); !differ || name != tc.name || av == bv {
			t.Errorf("Diff = %q %q %q %v, want %s", name, av, bv, differ, tc.name)
		}
		if a.Fingerprint() == b.Fingerprint() {
			t.Errorf("%s: same fingerprint", tc.name)
		}
	}
	if _, _, _, differ := a.Diff(a); differ {
		t.Error("a plan differs from itself")
	}
}

// TestOptions: the tables' options follow from the plan alone, and
// GOCOLL_ALGO said in other words is the same plan.
func TestOptions(t *testing.T) {
	cheap, err := Plan{HalfAccum: "float32"}.Options()
	if err != nil || cheap.RingChunk != 0 || cheap.SmallAllReducePow2 != 0 || cheap.Round16 || cheap.SingleCopyMin != SingleCopyMin {
		t.Errorf("cheap steps: %+v, %v", cheap, err)
	}
	costly, err := Plan{HalfAccum: "16bit", StepCostly: true, Algos: "allreduce=ring"}.Options()
	if err != nil || costly.RingChunk != ringChunk || costly.SmallAllReducePow2 != smallPow2 || !costly.Round16 || costly.Algos[collectives.AllReduce] != collectives.Ring {
		t.Errorf("costly steps: %+v, %v", costly, err)
	}
	// The hierarchical pipeline's stage follows the message size every
	// rank agreed on, in whole messages' payloads (a default slot's
	// 256 KiB behind the headers, or a slot's less the headers, to a
	// cache line); a plan without one leaves the group's default.
	for _, tc := range []struct{ max, want int }{{256<<10 + 64, 4 * 256 << 10}, {262112, 4 * 262016}} {
		if o, err := (Plan{HalfAccum: "float32", MaxMessage: tc.max}).Options(); err != nil || o.HierSegment != tc.want {
			t.Errorf("MaxMessage %d: HierSegment %d, %v; want %d", tc.max, o.HierSegment, err, tc.want)
		}
	}
	if cheap.HierSegment != 0 {
		t.Errorf("no message size: HierSegment %d, want 0 (the group's default)", cheap.HierSegment)
	}
	for _, pair := range [][2]string{{"allreduce=recursive-doubling", "allreduce=rd"}, {"broadcast=chain, allreduce=ring", "allreduce=ring,broadcast=chain"}, {"auto", ""}} {
		a, err1 := collectives.ParseAlgos(pair[0])
		b, err2 := collectives.ParseAlgos(pair[1])
		if err1 != nil || err2 != nil || Canon(a) != Canon(b) {
			t.Errorf("Canon(%q) = %q, Canon(%q) = %q (%v, %v)", pair[0], Canon(a), pair[1], Canon(b), err1, err2)
		}
	}
}
