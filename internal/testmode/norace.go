//go:build !race

package testmode

const race = false
