package tcp

// StepCostly reports TCP's messages as costly beyond their bytes (see
// transport.StepCoster): each is a round of system calls, and with more
// ranks than cores, of wake-ups.
func (t *Transport) StepCostly() bool { return true }
