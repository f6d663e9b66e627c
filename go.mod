module github.com/gocoll/gocoll

go 1.22
