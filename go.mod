module github.com/gocoll/gocoll

go 1.24.0

require (
	github.com/klauspost/cpuid/v2 v2.2.10
	golang.org/x/sys v0.30.0
)
