package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/lock"
	"github.com/distlock/lock/gocronlock"
	"github.com/go-co-op/gocron/v2"
)

func ExampleNewLocker() {
	ctx := context.Background()
	// In production each replica opens the same backend: redis://, postgres://, etcd://, ...
	locker, err := lock.Open(ctx, "mem://example-gocron-locker")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	// The job runs every minute on every replica's scheduler; the lock lets
	// one replica run each due time. WithMinHold keeps the lock for half the
	// interval even if the job ends sooner, so a replica whose clock or timer
	// is up to 30 s late finds it taken instead of running the job again.
	gl := gocronlock.NewLocker(locker, gocronlock.WithMinHold(30*time.Second))
	defer gl.Close()
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(gl))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan struct{})
	_, err = s.NewJob(gocron.DurationJob(time.Minute),
		gocron.NewTask(func() { fmt.Println("one replica sends the report"); close(ran) }),
		gocron.WithName("report"),
		gocron.WithStartAt(gocron.WithStartImmediately()))
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	<-ran
	_ = s.Shutdown()

	// Another replica asking for the same due time is refused, without waiting.
	_, err = gocronlock.NewLocker(locker).Lock(ctx, "report")
	fmt.Println("another replica skips:", errors.Is(err, lock.ErrLocked))
	// Output:
	// one replica sends the report
	// another replica skips: true
}

func ExampleNewElector() {
	ctx := context.Background()
	locker, err := lock.Open(ctx, "mem://example-gocron-elector")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	// The Elector campaigns in the background; only the leader's scheduler
	// runs jobs, and another replica takes over when the leader goes away.
	el, err := gocronlock.NewElector(ctx, locker, "scheduler-leader",
		gocronlock.WithValue("replica-1"), gocronlock.WithCampaignOptions(lock.WithTTL(10*time.Second)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer el.Close()
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(el))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan struct{})
	var once sync.Once
	_, err = s.NewJob(gocron.DurationJob(50*time.Millisecond),
		gocron.NewTask(func() {
			once.Do(func() {
				fmt.Println("the leader runs the job")
				close(ran)
			})
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	<-ran
	_ = s.Shutdown()

	leader, err := locker.Leader(ctx, "scheduler-leader")
	fmt.Println("leader:", leader.Value, err)
	// Output:
	// the leader runs the job
	// leader: replica-1 <nil>
}
