//go:build race

package testmode

// race: built with the race detector (-race), which makes every memory
// access several times dearer.
const race = true
