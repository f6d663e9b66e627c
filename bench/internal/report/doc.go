// Package report holds collbench's results as data: the JSON a run writes
// (metadata plus one row per size), reading it back, and drawing several
// results on one PNG, so that collbench and bench/compare share one format.
package report
