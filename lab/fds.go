package lab

import (
	"os"
	"strconv"
	"sync"
	"syscall"
)

// keepFDs marks every descriptor this process inherited beyond stdin, stdout and stderr
// close-on-exec, once, before the lab starts anything. A lab's daemons (dockerd, the services,
// the probes) outlive the command that started them, and each would otherwise hold what that
// command was given: `flock LOCK meshlab up` left the lock held by the lab's machines until
// `meshlab down`, so the next `flock LOCK meshlab ...` waited forever.
var keepFDs = sync.OnceFunc(func() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
})
