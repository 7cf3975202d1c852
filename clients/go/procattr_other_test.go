//go:build !linux

package onceq_test

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
