package kernel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// op names one of the three products.
type op uint8

const (
	opNN op = iota
	opNT
	opTN
)

// parallelMinFlops is the smallest product, in multiply-adds m·k·n, that is
// shared with the worker pool; below it handing work to another goroutine
// costs more than it saves.
const parallelMinFlops = 1 << 18

// Work is shared out in blocks of c, each computed by one participant with
// its own packing (gemm.go). Alone, the caller takes the whole product in
// column blocks of nc. Shared, the larger of m and n is cut further, into
// blocksPer blocks per participant (so that a participant slowed by other
// work on the machine is made up for by the others), rows in multiples of
// the path's mr and columns in multiples of its nr. Block sizes change
// speed, never bits.
const blocksPer = 2

// job is one product shared between its caller and some workers. Each
// participant claims blocks through next until none are left, so the split
// adapts to whoever is free, while every element is computed the same way
// whichever participant computes it.
type job struct {
	op                op
	path              *path
	c, a, b           []float32
	m, k, n           int
	rowsPer, colsPer  int
	colBlocks, blocks int64
	next              atomic.Int64
	done              sync.WaitGroup
	// scratch is the caller's scratch space; each worker has its own.
	scratch scratch
}

// jobList keeps up to 64 jobs for reuse, last in first out, so that a
// caller gets back the job (and the scratch space in it) it used last.
// Unlike a sync.Pool it is not emptied by the garbage collector, so a kernel
// call in steady state never allocates, not even after a collection.
type jobList struct {
	mu   sync.Mutex
	kept []*job
}

// get returns the most recently kept job, or a new one if none is kept.
func (l *jobList) get() *job {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kept) == 0 {
		return new(job)
	}
	j := l.kept[len(l.kept)-1]
	l.kept = l.kept[:len(l.kept)-1]
	return j
}

// put keeps j for reuse, or drops it if 64 are kept already.
func (l *jobList) put(j *job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kept) < cap(l.kept) {
		l.kept = append(l.kept, j)
	}
}

var (
	jobs = &jobList{kept: make([]*job, 0, 64)}

	startPool sync.Once
	queue     chan *job
)

// start launches the fixed pool: one worker per CPU besides the caller's.
func start() {
	workers := runtime.NumCPU() - 1
	queue = make(chan *job, 4*workers+4)
	for range workers {
		go func() {
			var scratch scratch // this worker's own, grown as needed
			for j := range queue {
				j.work(&scratch)
				j.done.Done()
			}
		}()
	}
}

// run computes the product o on path pt, on the caller alone when it is
// small and together with the pool otherwise.
func run(o op, pt *path, c, a, b []float32, m, k, n int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c)
		return
	}
	parts := 1
	if m*k*n >= parallelMinFlops {
		// The pool has NumCPU-1 workers, so helpers never outnumber them.
		parts = min(runtime.GOMAXPROCS(0), runtime.NumCPU())
	}
	rowsPer, colsPer := m, min(n, nc)
	if parts > 1 {
		want := parts * blocksPer
		if m >= n {
			rowsPer = roundUp((m+want-1)/want, pt.mr)
		} else {
			colsPer = min(colsPer, roundUp((n+want-1)/want, pt.nr()))
		}
	}
	colBlocks := (n + colsPer - 1) / colsPer
	j := jobs.get()
	j.op, j.path, j.c, j.a, j.b, j.m, j.k, j.n = o, pt, c, a, b, m, k, n
	j.rowsPer, j.colsPer = rowsPer, colsPer
	j.colBlocks = int64(colBlocks)
	j.blocks = int64(colBlocks * ((m + rowsPer - 1) / rowsPer))
	j.next.Store(0)
	helpers := min(parts, int(j.blocks)) - 1
	if helpers > 0 {
		startPool.Do(start)
	}
	for range helpers {
		j.done.Add(1)
		select {
		case queue <- j:
		default: // every worker is busy and the queue is full: go on without
			j.done.Done()
		}
	}
	j.work(&j.scratch)
	j.done.Wait()
	j.c, j.a, j.b = nil, nil, nil
	jobs.put(j)
}

// work claims and computes blocks of j until none are left. It first grows
// s to what the job's largest block needs, so that whether a participant
// allocates does not depend on which blocks it happens to claim.
func (j *job) work(s *scratch) {
	kb, nr := min(kc, j.k), j.path.nr()
	if layoutA(j.path, j.op, j.m, j.k) == packedA {
		s.a = grow(s.a, kb*min(mc, j.rowsPer), mostA)
	}
	s.b = grow(s.b, kb*roundUp(j.colsPer, nr), mostB)
	s.tile = grow(s.tile, j.path.mr*nr, mostTile)
	for {
		blk := j.next.Add(1) - 1
		if blk >= j.blocks {
			return
		}
		i0 := int(blk/j.colBlocks) * j.rowsPer
		j0 := int(blk%j.colBlocks) * j.colsPer
		j.block(j.path, i0, min(i0+j.rowsPer, j.m), j0, min(j0+j.colsPer, j.n), s)
	}
}

// roundUp returns x rounded up to a multiple of q.
func roundUp(x, q int) int { return (x + q - 1) / q * q }
