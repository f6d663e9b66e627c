package bootstrap

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// env is a launch environment for FromEnv.
type env map[string]string

func (e env) lookup(k string) (string, bool) {
	v, ok := e[k]
	return v, ok
}

// merge returns the union of es; later ones win.
func merge(es ...env) env {
	m := env{}
	for _, e := range es {
		for k, v := range e {
			m[k] = v
		}
	}
	return m
}

// A launcher's variables for rank 1 of 4, two per host.
var (
	grunEnv = env{"GRUN_RANK": "1", "GRUN_SIZE": "4", "GRUN_LOCAL_RANK": "1", "GRUN_LOCAL_SIZE": "2",
		"GRUN_ADDR": "127.0.0.1:40123", "GRUN_TOKEN": "3f2a9c0d1e5b7a8c"}
	torchEnv = env{"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
		"MASTER_ADDR": "node0", "MASTER_PORT": "29400"}
	ompiEnv = env{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
		"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
	slurmEnv = env{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "812", "SLURM_STEP_ID": "0"}
)

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  env
		want Config
	}{
		{
			name: "grun",
			env:  grunEnv,
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "127.0.0.1:40123", Token: []byte("3f2a9c0d1e5b7a8c"), Source: "grun"},
		},
		{
			name: "grun rank 0 does not serve: grun does",
			env:  merge(grunEnv, env{"GRUN_RANK": "0", "GRUN_LOCAL_RANK": "0"}),
			want: Config{Rank: 0, Size: 4, LocalRank: 0, LocalSize: 2, Addr: "127.0.0.1:40123", Token: []byte("3f2a9c0d1e5b7a8c"), Source: "grun"},
		},
		{
			name: "grun without local placement or token",
			env:  env{"GRUN_RANK": "2", "GRUN_SIZE": "3", "GRUN_ADDR": "[::1]:5000"},
			want: Config{Rank: 2, Size: 3, LocalRank: -1, LocalSize: -1, Addr: "[::1]:5000", Source: "grun"},
		},
		{
			name: "GOCOLL_HALF_ACCUM, with any launcher",
			env:  merge(grunEnv, env{"GOCOLL_HALF_ACCUM": " 16bit "}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "127.0.0.1:40123", Token: []byte("3f2a9c0d1e5b7a8c"), Source: "grun", HalfAccum: "16bit"},
		},
		{
			name: "grun single rank",
			env:  env{"GRUN_RANK": "0", "GRUN_SIZE": "1", "GRUN_ADDR": "127.0.0.1:1"},
			want: Config{Rank: 0, Size: 1, LocalRank: -1, LocalSize: -1, Addr: "127.0.0.1:1", Source: "grun"},
		},
		{
			name: "grun values with surrounding blanks",
			env: env{"GRUN_RANK": " 3\n", "GRUN_SIZE": "\t4 ", "GRUN_LOCAL_RANK": " ", "GRUN_LOCAL_SIZE": "",
				"GRUN_ADDR": " h:7 "},
			want: Config{Rank: 3, Size: 4, LocalRank: -1, LocalSize: -1, Addr: "h:7", Source: "grun"},
		},
		{
			// The token is the text itself: not hex-decoded, not trimmed.
			name: "token is raw text",
			env:  merge(grunEnv, env{"GRUN_TOKEN": "00ff00ff00ff00ff"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "127.0.0.1:40123", Token: []byte("00ff00ff00ff00ff"), Source: "grun"},
		},
		{
			name: "token blanks kept",
			env:  merge(grunEnv, env{"GRUN_TOKEN": " a secret, kept \n"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "127.0.0.1:40123", Token: []byte(" a secret, kept \n"), Source: "grun"},
		},
		{
			name: "grun wins over every other launcher",
			env:  merge(slurmEnv, ompiEnv, torchEnv, env{"RANK": "3", "OMPI_COMM_WORLD_RANK": "2", "SLURM_PROCID": "0"}, grunEnv),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "127.0.0.1:40123", Token: []byte("3f2a9c0d1e5b7a8c"), Source: "grun"},
		},
		{
			name: "torchrun",
			env:  torchEnv,
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "node0:29400", Source: "torchrun"},
		},
		{
			name: "torchrun rank 0 serves",
			env:  merge(torchEnv, env{"RANK": "0", "LOCAL_RANK": "0"}),
			want: Config{Rank: 0, Size: 4, LocalRank: 0, LocalSize: 2, Addr: "node0:29400", Serve: true, Source: "torchrun"},
		},
		{
			name: "torchrun default port",
			env:  env{"RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "10.1.2.3"},
			want: Config{Rank: 2, Size: 3, LocalRank: -1, LocalSize: -1, Addr: "10.1.2.3:" + DefaultMasterPort, Source: "torchrun"},
		},
		{
			name: "torchrun IPv6 master",
			env:  env{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "fd00::1", "MASTER_PORT": "6000"},
			want: Config{Rank: 0, Size: 2, LocalRank: -1, LocalSize: -1, Addr: "[fd00::1]:6000", Serve: true, Source: "torchrun"},
		},
		{
			name: "torchrun with GRUN_ADDR and GRUN_TOKEN",
			env:  merge(torchEnv, env{"GRUN_ADDR": "store:1234", "GRUN_TOKEN": "tok-of-sixteen-b"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "store:1234", Token: []byte("tok-of-sixteen-b"), Source: "torchrun"},
		},
		{
			name: "GOCOLL_INSECURE",
			env:  merge(torchEnv, env{"GOCOLL_INSECURE": " 1"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "node0:29400", Source: "torchrun", Insecure: true},
		},
		{
			name: "GOCOLL_INSECURE=0",
			env:  merge(torchEnv, env{"GOCOLL_INSECURE": "0"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "node0:29400", Source: "torchrun"},
		},
		{
			name: "torchrun single rank needs no address",
			env:  env{"RANK": "0", "WORLD_SIZE": "1"},
			want: Config{Rank: 0, Size: 1, LocalRank: -1, LocalSize: -1, Source: "torchrun"},
		},
		{
			name: "empty grun variables are not grun",
			env:  merge(torchEnv, env{"GRUN_RANK": "", "GRUN_SIZE": " "}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "node0:29400", Source: "torchrun"},
		},
		{
			name: "torchrun's agent wins over Open MPI and Slurm",
			env: merge(slurmEnv, ompiEnv, torchEnv, env{"OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "2",
				"TORCHELASTIC_RUN_ID": "r7", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_USE_AGENT_STORE": "False"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "node0:29400", Source: "torchrun", Job: "torchrun r7 attempt 0"},
		},
		{
			name: "static torchrun with GRUN_ADDR",
			env: merge(torchEnv, env{"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0",
				"TORCHELASTIC_USE_AGENT_STORE": "True", "GRUN_ADDR": "node0:29401"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "node0:29401", Source: "torchrun", Job: "torchrun none attempt 0"},
		},
		// A leftover RANK/WORLD_SIZE (an earlier torchrun, a shell profile)
		// must not turn mpirun's or srun's ranks into one-rank jobs.
		{
			name: "mpirun wins over a leftover RANK",
			env:  merge(ompiEnv, env{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "head", "OMPI_MCA_ess_base_jobid": "1791819777"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "head:29500", Source: "openmpi", Job: "openmpi 1791819777"},
		},
		{
			name: "srun wins over a leftover RANK",
			env:  merge(slurmEnv, env{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "node7"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: -1, Addr: "node7:29500", Source: "slurm", Job: "slurm 812.0"},
		},
		{
			name: "Open MPI's job from PMIx",
			env:  merge(ompiEnv, env{"MASTER_ADDR": "head", "PMIX_NAMESPACE": "77"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "head:29500", Source: "openmpi", Job: "openmpi 77"},
		},
		{
			name: "a one-task batch script runs its one rank",
			env:  env{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "5"},
			want: Config{Rank: 0, Size: 1, LocalRank: -1, LocalSize: -1, Source: "slurm"},
		},
		{
			name: "Open MPI",
			env:  merge(ompiEnv, env{"MASTER_ADDR": "head", "MASTER_PORT": "7000"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "head:7000", Source: "openmpi"},
		},
		{
			name: "Open MPI rank 0 serves at GRUN_ADDR",
			env:  merge(ompiEnv, env{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "GRUN_ADDR": "head:7001", "MASTER_ADDR": "other"}),
			want: Config{Rank: 0, Size: 4, LocalRank: 0, LocalSize: 2, Addr: "head:7001", Serve: true, Source: "openmpi"},
		},
		{
			name: "Open MPI wins over Slurm",
			env:  merge(slurmEnv, ompiEnv, env{"SLURM_PROCID": "3", "MASTER_ADDR": "head"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "head:29500", Source: "openmpi"},
		},
		{
			// An mpirun around the job script (or a shell that ran one)
			// leaves OMPI_*; srun's task is this very process.
			name: "srun's own task wins over stale OMPI_*",
			env:  merge(ompiEnv, slurmEnv, env{"SLURM_TASK_PID": strconv.Itoa(os.Getpid()), "MASTER_ADDR": "node7"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: -1, Addr: "node7:29500", Source: "slurm", Job: "slurm 812.0"},
		},
		{
			// mpirun started inside an srun step: its ranks are not the
			// task srun started, so Open MPI is the inner launcher.
			name: "mpirun inside an srun step",
			env:  merge(slurmEnv, ompiEnv, env{"SLURM_TASK_PID": "1", "MASTER_ADDR": "head"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: 2, Addr: "head:29500", Source: "openmpi"},
		},
		{
			name: "Slurm",
			env:  merge(slurmEnv, env{"MASTER_ADDR": "node7"}),
			want: Config{Rank: 1, Size: 4, LocalRank: 1, LocalSize: -1, Addr: "node7:29500", Source: "slurm", Job: "slurm 812.0"},
		},
		{
			name: "Slurm without a local id",
			env:  env{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "3", "SLURM_JOB_ID": "9", "MASTER_ADDR": "node7", "GRUN_TOKEN": "t-sixteen-bytes!"},
			want: Config{Rank: 0, Size: 2, LocalRank: -1, LocalSize: -1, Addr: "node7:29500", Serve: true, Token: []byte("t-sixteen-bytes!"), Source: "slurm", Job: "slurm 9.3"},
		},
		{
			name: "srun -n1 needs no address",
			env:  env{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"},
			want: Config{Rank: 0, Size: 1, LocalRank: 0, LocalSize: -1, Source: "slurm"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(tt.env.lookup)
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if !configEqual(got, tt.want) {
				t.Fatalf("FromEnv =\n  %+v\nwant\n  %+v", got, tt.want)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("FromEnv returned a Config that does not validate: %v", err)
			}
		})
	}
}

func configEqual(a, b Config) bool {
	return a.Rank == b.Rank && a.Size == b.Size && a.LocalRank == b.LocalRank && a.LocalSize == b.LocalSize &&
		a.Addr == b.Addr && a.Serve == b.Serve && bytes.Equal(a.Token, b.Token) && (a.Token == nil) == (b.Token == nil) &&
		a.Source == b.Source && a.Job == b.Job && a.Insecure == b.Insecure && a.HalfAccum == b.HalfAccum
}

// mentions reports whether msg names the variable v as a whole word (so
// that RANK is not found in GRUN_RANK).
func mentions(msg, v string) bool {
	return regexp.MustCompile(`(^|[^A-Z_])` + v + `([^A-Z_]|$)`).MatchString(msg)
}

func TestFromEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  env
		vars []string // variables the message must name
	}{
		{"nothing set", env{}, []string{"GRUN_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}},
		{"unrelated variables only", env{"LOCAL_RANK": "0", "MASTER_ADDR": "h", "GRUN_TOKEN": "t", "OMPI_COMM_WORLD_SIZE": "2"}, []string{"GRUN_RANK"}},
		{"blank rank variables", env{"GRUN_RANK": " ", "RANK": "", "OMPI_COMM_WORLD_RANK": "\t", "SLURM_PROCID": ""}, []string{"GRUN_RANK"}},

		{"grun: missing size", merge(grunEnv, env{"GRUN_SIZE": ""}), []string{"GRUN_SIZE"}},
		{"grun: missing rank", env{"GRUN_SIZE": "2", "GRUN_ADDR": "h:1"}, []string{"GRUN_RANK"}},
		{"grun found by its size alone wins over torchrun", env{"GRUN_SIZE": "2", "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, []string{"GRUN_RANK"}},
		{"grun: missing address", env{"GRUN_RANK": "0", "GRUN_SIZE": "1"}, []string{"GRUN_ADDR"}},
		{"grun: non-numeric rank", merge(grunEnv, env{"GRUN_RANK": "one"}), []string{"GRUN_RANK"}},
		{"grun: fractional rank", merge(grunEnv, env{"GRUN_RANK": "1.0"}), []string{"GRUN_RANK"}},
		{"grun: size overflows", merge(grunEnv, env{"GRUN_SIZE": "99999999999999999999"}), []string{"GRUN_SIZE"}},
		{"grun: negative rank", merge(grunEnv, env{"GRUN_RANK": "-1"}), []string{"GRUN_RANK"}},
		{"grun: rank equals size", merge(grunEnv, env{"GRUN_RANK": "4"}), []string{"GRUN_RANK", "GRUN_SIZE"}},
		{"grun: size 0", merge(grunEnv, env{"GRUN_RANK": "0", "GRUN_SIZE": "0"}), []string{"GRUN_SIZE"}},
		{"grun: negative size", merge(grunEnv, env{"GRUN_SIZE": "-4"}), []string{"GRUN_SIZE"}},
		{"grun: non-numeric local rank", merge(grunEnv, env{"GRUN_LOCAL_RANK": "x"}), []string{"GRUN_LOCAL_RANK"}},
		{"grun: local rank equals local size", merge(grunEnv, env{"GRUN_LOCAL_RANK": "2"}), []string{"GRUN_LOCAL_RANK", "GRUN_LOCAL_SIZE"}},
		{"grun: negative local rank", merge(grunEnv, env{"GRUN_LOCAL_RANK": "-1"}), []string{"GRUN_LOCAL_RANK"}},
		{"grun: local size 0", merge(grunEnv, env{"GRUN_LOCAL_SIZE": "0", "GRUN_LOCAL_RANK": ""}), []string{"GRUN_LOCAL_SIZE"}},
		{"grun: local size over size", merge(grunEnv, env{"GRUN_LOCAL_SIZE": "5"}), []string{"GRUN_LOCAL_SIZE", "GRUN_SIZE"}},
		{"grun: local rank over size", merge(grunEnv, env{"GRUN_LOCAL_SIZE": "", "GRUN_LOCAL_RANK": "4"}), []string{"GRUN_LOCAL_RANK", "GRUN_SIZE"}},
		{"grun: address without port", merge(grunEnv, env{"GRUN_ADDR": "127.0.0.1"}), []string{"GRUN_ADDR"}},
		{"grun: address with port 0", merge(grunEnv, env{"GRUN_ADDR": "127.0.0.1:0"}), []string{"GRUN_ADDR"}},
		{"grun: address with a bad port", merge(grunEnv, env{"GRUN_ADDR": "127.0.0.1:99999"}), []string{"GRUN_ADDR"}},

		{"torchrun: missing world size", merge(torchEnv, env{"WORLD_SIZE": ""}), []string{"WORLD_SIZE"}},
		{"torchrun: missing rank", env{"WORLD_SIZE": "2", "MASTER_ADDR": "h"}, []string{"RANK"}},
		{"torchrun: non-numeric rank", merge(torchEnv, env{"RANK": "0x1"}), []string{"RANK"}},
		{"torchrun: rank over size", merge(torchEnv, env{"RANK": "7"}), []string{"RANK", "WORLD_SIZE"}},
		{"torchrun: world size 0", merge(torchEnv, env{"RANK": "0", "WORLD_SIZE": "0"}), []string{"WORLD_SIZE"}},
		{"torchrun: no master address", merge(torchEnv, env{"MASTER_ADDR": ""}), []string{"MASTER_ADDR", "GRUN_ADDR"}},
		{"torchrun: port without address", env{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}, []string{"MASTER_ADDR"}},
		{"torchrun: non-numeric port", merge(torchEnv, env{"MASTER_PORT": "http"}), []string{"MASTER_PORT"}},
		{"torchrun: port too large", merge(torchEnv, env{"MASTER_PORT": "70000"}), []string{"MASTER_PORT"}},
		{"torchrun: port 0", merge(torchEnv, env{"MASTER_PORT": "0"}), []string{"MASTER_PORT"}},
		{"torchrun: negative local rank", merge(torchEnv, env{"LOCAL_RANK": "-2"}), []string{"LOCAL_RANK"}},
		{"torchrun: local rank over local size", merge(torchEnv, env{"LOCAL_RANK": "3"}), []string{"LOCAL_RANK", "LOCAL_WORLD_SIZE"}},
		{"torchrun: local size over size", merge(torchEnv, env{"LOCAL_WORLD_SIZE": "8"}), []string{"LOCAL_WORLD_SIZE", "WORLD_SIZE"}},
		{"GOCOLL_INSECURE not a yes or no", merge(torchEnv, env{"GOCOLL_INSECURE": "maybe"}), []string{"GOCOLL_INSECURE"}},
		{"hand-set token too short", merge(torchEnv, env{"GRUN_TOKEN": "hunter2"}), []string{"GRUN_TOKEN", "16"}},
		{"empty token", merge(grunEnv, env{"GRUN_TOKEN": ""}), []string{"GRUN_TOKEN", "at least 16"}},
		{"torchrun: bad GRUN_ADDR", merge(torchEnv, env{"GRUN_ADDR": "store"}), []string{"GRUN_ADDR"}},

		{"Open MPI: missing size", env{"OMPI_COMM_WORLD_RANK": "0", "MASTER_ADDR": "h"}, []string{"OMPI_COMM_WORLD_SIZE"}},
		{"Open MPI: rank over size", merge(ompiEnv, env{"OMPI_COMM_WORLD_RANK": "4", "MASTER_ADDR": "h"}), []string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}},
		{"Open MPI: local rank over local size", merge(ompiEnv, env{"OMPI_COMM_WORLD_LOCAL_RANK": "2", "MASTER_ADDR": "h"}), []string{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}},
		{"Open MPI: no rendezvous address", ompiEnv, []string{"MASTER_ADDR", "GRUN_ADDR"}},

		{"Slurm: missing task count", env{"SLURM_PROCID": "0", "MASTER_ADDR": "h"}, []string{"SLURM_NTASKS"}},
		{"Slurm: non-numeric rank", merge(slurmEnv, env{"SLURM_PROCID": "first", "MASTER_ADDR": "h"}), []string{"SLURM_PROCID"}},
		{"Slurm: rank over task count", merge(slurmEnv, env{"SLURM_PROCID": "9", "MASTER_ADDR": "h"}), []string{"SLURM_PROCID", "SLURM_NTASKS"}},
		{"Slurm: local id over task count", merge(slurmEnv, env{"SLURM_LOCALID": "4", "MASTER_ADDR": "h"}), []string{"SLURM_LOCALID", "SLURM_NTASKS"}},
		{"Slurm: no rendezvous address", slurmEnv, []string{"MASTER_ADDR"}},
		// The batch script itself (no SLURM_STEP_ID) of a 4-task job: the
		// other three ranks never come; say so at once, not after the timeout.
		{"Slurm: batch step without srun", merge(slurmEnv, env{"SLURM_PROCID": "0", "SLURM_STEP_ID": "", "MASTER_ADDR": "h"}), []string{"SLURM_STEP_ID", "srun"}},
		{"leftover RANK in a batch step", merge(slurmEnv, env{"SLURM_STEP_ID": "", "RANK": "0", "WORLD_SIZE": "1"}), []string{"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_STEP_ID", "srun"}},
		// torchrun's static rendezvous: the agent holds MASTER_PORT.
		{"torchrun static without GRUN_ADDR", merge(torchEnv, env{"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_USE_AGENT_STORE": "True"}),
			[]string{"TORCHELASTIC_USE_AGENT_STORE", "GRUN_ADDR", "MASTER_PORT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(tt.env.lookup)
			if !errors.Is(err, ErrEnv) {
				t.Fatalf("FromEnv = %+v, %v; want an error wrapping ErrEnv", got, err)
			}
			for _, v := range tt.vars {
				if !mentions(err.Error(), v) {
					t.Errorf("error %q does not name %s", err, v)
				}
			}
			if !configEqual(got, Config{}) {
				t.Errorf("FromEnv returned %+v with its error, want the zero Config", got)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want string // in the error; "" means valid
	}{
		{"single rank, nothing else", Config{Size: 1}, ""},
		{"filled directly, local fields left zero", Config{Rank: 3, Size: 4, Addr: "127.0.0.1:9000"}, ""},
		{"local placement unknown", Config{Rank: 1, Size: 2, LocalRank: -1, LocalSize: -1, Addr: "h:1"}, ""},
		{"local placement known", Config{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, Addr: "h:1"}, ""},
		{"single rank serving", Config{Size: 1, Serve: true, Addr: "127.0.0.1:0"}, ""},
		{"IPv6 address", Config{Rank: 1, Size: 2, Addr: "[::1]:5000"}, ""},

		{"size 0", Config{}, "config: size 0, want at least 1"},
		{"negative size", Config{Rank: 0, Size: -2, Source: "mine"}, "mine: size -2"},
		{"negative rank", Config{Rank: -1, Size: 2, Addr: "h:1"}, "rank -1 out of range for size 2"},
		{"rank equals size", Config{Rank: 2, Size: 2, Addr: "h:1"}, "rank 2 out of range for size 2"},
		{"local rank equals local size", Config{Rank: 1, Size: 4, LocalRank: 2, LocalSize: 2, Addr: "h:1"}, "local rank 2 out of range for local size 2"},
		{"negative local rank with a local size", Config{Rank: 1, Size: 4, LocalRank: -1, LocalSize: 2, Addr: "h:1"}, "local rank -1"},
		{"local size over size", Config{Rank: 1, Size: 2, LocalRank: 0, LocalSize: 3, Addr: "h:1"}, "local size 3 larger than size 2"},
		{"several ranks, no address", Config{Rank: 1, Size: 2}, "no rendezvous address"},
		{"serving, no address", Config{Size: 1, Serve: true, Source: "torchrun"}, "torchrun: no rendezvous address"},
		{"address without port", Config{Rank: 1, Size: 2, Addr: "node0"}, `rendezvous address "node0"`},
		{"unbracketed IPv6", Config{Rank: 1, Size: 2, Addr: "fd00::1:5000"}, "rendezvous address"},
		{"half accumulation float32", Config{Size: 1, HalfAccum: "float32"}, ""},
		{"half accumulation 16bit", Config{Size: 1, HalfAccum: "16bit"}, ""},
		{"half accumulation unknown", Config{Size: 1, HalfAccum: "fp16"}, `GOCOLL_HALF_ACCUM="fp16": want float32 or 16bit`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v, want an ErrEnv saying %q", err, tt.want)
			}
		})
	}
}

// TestSingleton: a process with none of a launcher's marks is a job of one
// rank; one with any of them is left to FromEnv, which then either reads a
// launcher or names what is missing, never "no launcher".
func TestSingleton(t *testing.T) {
	tests := []struct {
		name  string
		env   env
		alone bool
	}{
		{"empty", env{}, true},
		{"store address only", env{"GRUN_ADDR": "127.0.0.1:1", "MASTER_ADDR": "node0", "MASTER_PORT": "29400"}, true},
		{"blank marks", env{"RANK": " ", "GRUN_RANK": ""}, true},
		{"half accumulation kept", env{"GOCOLL_HALF_ACCUM": "16bit"}, true},
		{"grun", grunEnv, false},
		{"grun size only", env{"GRUN_SIZE": "2"}, false},
		{"torchrun", torchEnv, false},
		{"torch world size only", env{"WORLD_SIZE": "1"}, false},
		{"openmpi", ompiEnv, false},
		{"slurm", slurmEnv, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, alone := Singleton(tt.env.lookup)
			if alone != tt.alone {
				t.Fatalf("Singleton = %v, want %v", alone, tt.alone)
			}
			_, err := FromEnv(tt.env.lookup)
			if says := err != nil && strings.Contains(err.Error(), "no launcher environment"); says != tt.alone {
				t.Errorf("FromEnv says no launcher: %v (%v), Singleton: %v", says, err, alone)
			}
			if !alone {
				return
			}
			if err := c.Validate(); err != nil || c.Rank != 0 || c.Size != 1 || c.Addr != "" || c.Serve || c.Source != "singleton" {
				t.Errorf("config %+v (%v), want rank 0 of 1, no store", c, err)
			}
			if c.HalfAccum != strings.TrimSpace(tt.env["GOCOLL_HALF_ACCUM"]) {
				t.Errorf("HalfAccum = %q", c.HalfAccum)
			}
		})
	}
}
