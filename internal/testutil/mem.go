package testutil

import "runtime"

// HeapInUse collects twice (what the first frees, finalizers included,
// goes in the second) and returns the heap and goroutine stacks in use:
// what a benchmark of memory held per connection reads before and after.
func HeapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}
