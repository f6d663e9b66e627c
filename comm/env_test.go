package comm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/internal/freeport"
	"github.com/gocoll/gocoll/transport/rdma"
	"github.com/gocoll/gocoll/transport/tcp"
)

// setLaunchEnv leaves exactly env's launcher and GOCOLL_ variables set.
func setLaunchEnv(t *testing.T, env map[string]string) {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GRUN_"), strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "SLURM_"), strings.HasPrefix(k, "PMIX_"),
			strings.HasPrefix(k, "TORCHELASTIC_"), strings.HasPrefix(k, "MASTER_"), strings.HasPrefix(k, "GOCOLL_"),
			k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE":
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// TestInitMistakes: environments users got wrong (issue 27) fail Init at
// once, naming what to fix, instead of waiting out the timeout or going on
// quietly.
func TestInitMistakes(t *testing.T) {
	port := freeport.Get(t)
	cases := []struct {
		name string
		env  map[string]string
		want error
		says []string
	}{
		{"GOCOLL_DEBUG typo", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_DEBUG": "verbose"}, comm.ErrInvalid, []string{`GOCOLL_DEBUG="verbose"`, "info"}},
		{"sbatch without srun", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
			comm.ErrEnv, []string{"SLURM_STEP_ID", "srun"}},
		{"MASTER_ADDR of another host", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "MASTER_ADDR": "198.18.250.1", "MASTER_PORT": port},
			comm.ErrEnv, []string{"198.18.250.1 is not an address of this host", "127.0.0.1"}},
		{"GOCOLL_ELASTIC typo", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_ELASTIC": "yes please"}, comm.ErrInvalid, []string{`GOCOLL_ELASTIC="yes please"`, "1 or 0"}},
		{"GOCOLL_TIMEOUT overflows", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_TIMEOUT": "1e10"}, comm.ErrInvalid, []string{`GOCOLL_TIMEOUT="1e10"`, "1ms to 8760h"}},
		{"GOCOLL_TIMEOUT infinite", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_TIMEOUT": "inf"}, comm.ErrInvalid, []string{`GOCOLL_TIMEOUT="inf"`}},
		{"GOCOLL_TIMEOUT below a millisecond", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_TIMEOUT": "1e-12"}, comm.ErrInvalid, []string{`GOCOLL_TIMEOUT="1e-12"`}},
		{"GOCOLL_TIMEOUT negative", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_TIMEOUT": "-3"}, comm.ErrInvalid, []string{`GOCOLL_TIMEOUT="-3"`}},
		{"GOCOLL_STALL overflows", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_STALL": "1e10"}, comm.ErrInvalid, []string{`GOCOLL_STALL="1e10"`}},
		{"GOCOLL_FAKE_HOSTS garbage", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_FAKE_HOSTS": "lots"}, comm.ErrInvalid, []string{`GOCOLL_FAKE_HOSTS="lots"`}},
		{"GOCOLL_HALF_ACCUM unknown", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_HALF_ACCUM": "fp8"}, comm.ErrEnv, []string{`GOCOLL_HALF_ACCUM="fp8"`, "float32 or 16bit"}},
		{"GOCOLL_STALL typo", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_STALL": "soon"}, comm.ErrInvalid, []string{`GOCOLL_STALL="soon"`, "off"}},
		{"GOCOLL_SPIN not a duration", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_SPIN": "fast"}, comm.ErrInvalid, []string{`GOCOLL_SPIN="fast"`, "20us"}},
		{"GOCOLL_SPIN negative", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_SPIN": "-1ms"}, comm.ErrInvalid, []string{`GOCOLL_SPIN="-1ms"`, "from 0 to 1s"}},
		{"GOCOLL_SPIN too long", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_SPIN": "5s"}, comm.ErrInvalid, []string{`GOCOLL_SPIN="5s"`}},
		{"GOCOLL_RDMA_CONNECT typo", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_RDMA_CONNECT": "warm"}, comm.ErrInvalid, []string{`GOCOLL_RDMA_CONNECT="warm"`, "lazy or eager"}},
		{"GOCOLL_TRACE unwritable", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_TRACE": "/nonexistent-dir/t-%r"}, comm.ErrInvalid,
			[]string{`GOCOLL_TRACE="/nonexistent-dir/t-%r"`, "/nonexistent-dir/t-0"}},
		{"GOCOLL_ENCRYPT typo", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_ENCRYPT": "aes"}, comm.ErrInvalid, []string{`GOCOLL_ENCRYPT="aes"`, "want 1"}},
		{"GOCOLL_ENCRYPT without a token", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "GOCOLL_ENCRYPT": "1"}, tcp.ErrNoToken, []string{"GRUN_TOKEN"}},
		{"torchrun static rendezvous", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
			"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"},
			comm.ErrEnv, []string{"GRUN_ADDR", "--standalone"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setLaunchEnv(t, tc.env)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			c, err := comm.Init(ctx)
			if err == nil {
				c.Close()
				t.Fatal("Init succeeded")
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Init took %v to fail", d)
			}
		})
	}
}

// TestOneRankForcedRDMA: a one-rank job told GOCOLL_TRANSPORT=rdma says
// "rdma" only if RDMA works here, and fails as two ranks would otherwise.
func TestOneRankForcedRDMA(t *testing.T) {
	setLaunchEnv(t, map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": freeport.Get(t), "GOCOLL_TRANSPORT": "rdma"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := comm.Init(ctx)
	if _, perr := rdma.Probe(rdma.Options{}); perr == nil {
		if err != nil || c.Transport() != "rdma" {
			t.Fatalf("with RDMA here: Init = %v; transport %q", err, c.Transport())
		}
		c.Close()
		return
	}
	if err == nil {
		defer c.Close()
		t.Fatalf("Init succeeded without RDMA on this machine; Transport() = %q", c.Transport())
	}
	if !errors.Is(err, comm.ErrUnsupported) || !strings.Contains(err.Error(), "GOCOLL_TRANSPORT=rdma") {
		t.Fatalf("err = %v, want ErrUnsupported naming GOCOLL_TRANSPORT=rdma", err)
	}
}
