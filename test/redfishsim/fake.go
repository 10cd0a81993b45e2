package redfishsim

import (
	"errors"
	"os"
	"sync"
)

// FakeMachine is a Machine in memory: a power flag, the boot it was last
// started with, and the image in its drive. A graceful power off is obeyed
// unless IgnoreACPI (a machine with no OS to hear the button).
type FakeMachine struct {
	mu         sync.Mutex
	on         bool
	boot       string
	media      []byte
	IgnoreACPI bool
}

// PoweredOn implements Machine.
func (f *FakeMachine) PoweredOn() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.on, nil
}

// PowerOn implements Machine.
func (f *FakeMachine) PowerOn(boot string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on, f.boot = true, boot
	return nil
}

// PowerOff implements Machine.
func (f *FakeMachine) PowerOff(graceful bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !graceful || !f.IgnoreACPI {
		f.on = false
	}
	return nil
}

// Reset implements Machine.
func (f *FakeMachine) Reset(boot string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on {
		return errors.New("the machine is off")
	}
	f.boot = boot
	return nil
}

// InsertMedia implements Machine: it reads the image, as a drive would.
func (f *FakeMachine) InsertMedia(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.media = b
	return nil
}

// EjectMedia implements Machine.
func (f *FakeMachine) EjectMedia() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.media = nil
	return nil
}

// Media returns the bytes of the image in the drive, nil when empty.
func (f *FakeMachine) Media() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.media
}

// LastBoot is the boot source of the last power on or reset.
func (f *FakeMachine) LastBoot() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boot
}
