module github.com/gocoll/gocoll

go 1.22

require golang.org/x/sys v0.30.0
