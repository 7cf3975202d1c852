package onceq_test

import "syscall"

// dieWithParent kills a child process (a server, a worker) if the test
// binary dies first.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
