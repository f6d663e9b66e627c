package blame

import "strconv"

// Members is how a sub-communicator numbers its ranks in the job
// (collectives.Channel is one).
type Members interface {
	Size() int
	JobRank(r int) int
}

// Names is how a communicator numbers and names its ranks in errors.
type Names struct {
	// Comm names the communicator: "" for the job's, else how it was
	// made ("split #1 color 0").
	Comm string
	// Rank is this rank, Size the communicator's, in its numbering.
	Rank, Size int
	// Members numbers the ranks in the job; nil where they are the
	// job's own (the job's communicator).
	Members Members
}

// JobRank is the job rank of rank r of this communicator.
func (n Names) JobRank(r int) int {
	if n.Members == nil || r < 0 || r >= n.Members.Size() {
		return r
	}
	return n.Members.JobRank(r)
}

// FromJob is the rank in this communicator of job rank j, or -1.
func (n Names) FromJob(j int) int {
	if n.Members == nil {
		if j >= n.Size {
			// A replacement of an elastic job (see Grow): never a
			// member of the job's first communicator.
			return -1
		}
		return j
	}
	for r := range n.Members.Size() {
		if n.Members.JobRank(r) == j {
			return r
		}
	}
	return -1
}

// Prefix starts this rank's errors: "comm: rank 2", and on a
// sub-communicator "comm: rank 1 (job rank 5) of split #1 color 0", so
// that each rank number says which numbering it is in.
func (n Names) Prefix() string {
	if n.Comm == "" {
		return "comm: rank " + strconv.Itoa(n.Rank)
	}
	return "comm: rank " + strconv.Itoa(n.Rank) + " (job rank " + strconv.Itoa(n.JobRank(n.Rank)) + ") of " + n.Comm
}

// JobWho names job rank j for errors: on a sub-communicator with its rank
// there, if it has one.
func (n Names) JobWho(j int) string {
	if n.Members == nil {
		return "rank " + strconv.Itoa(j)
	}
	if r := n.FromJob(j); r >= 0 {
		return n.WhoIs(r)
	}
	return "job rank " + strconv.Itoa(j)
}

// WhoIs names rank r of this communicator for errors: on a
// sub-communicator with its job rank too.
func (n Names) WhoIs(r int) string {
	if n.Members == nil || r < 0 {
		return "rank " + strconv.Itoa(r)
	}
	return "rank " + strconv.Itoa(r) + " (job rank " + strconv.Itoa(n.JobRank(r)) + ")"
}
