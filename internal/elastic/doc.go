// Package elastic is how the ranks of an elastic job agree, through the
// rendezvous store, on who goes on: the survivors of a failure (comm's
// Shrink), the replacements admitted (comm's Grow), and a replacement's
// side of joining a running job (taking a job rank, waiting for its
// admission, finding the job over). It owns the store's keys under
// "elastic/", the count of replacements waiting (Pending, kept fresh by
// its Watch), and how a shrunk or grown communicator's id and name
// follow from its parent's.
//
// Every agreement is one create in the store (bootstrap.Client.Create):
// the first proposal stored is the one every rank acts on, so ranks that
// saw the store at different moments still act alike. A Member is one
// rank's side of those agreements; package comm builds one from its
// communicator and turns the outcome into a new communicator.
//
// The keys:
//
//   - elastic/<id>/in/<job rank>: a rank in Shrink, and the members it
//     lost; elastic/<id>/decided: the survivors agreed;
//   - elastic/closed/<job rank>: a rank closed the job's communicator;
//   - elastic/transport/<rank>: "<name> <max message> <spare>" if the
//     rank listens on TCP for replacements, such as "shm 262144 68", else
//     the name of a transport that cannot grow; elastic/plan: the job's
//     plan; bootstrap.ElasticRunningKey: the job runs;
//   - elastic/joinrank/<k>: job rank k taken by a replacement;
//   - elastic/pending/<k>: "wait <start, unix ns>" while replacement k
//     waits, "admit <id> <members> <name>" once a Grow admitted it,
//     "gone" if it left before;
//   - elastic/<id>/grow/<seq>: the joiners the seq-th Grow admits.
package elastic
