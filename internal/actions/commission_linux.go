package actions

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctl numbers the commissioning actions use; x/sys/unix names neither.
const (
	// ioctlSGIO is SG_IO (scsi/sg.h).
	ioctlSGIO = 0x2285
	// ioctlNVMeAdmin is NVME_IOCTL_ADMIN_CMD, _IOWR('N', 0x41, struct
	// nvme_admin_cmd) (linux/nvme_ioctl.h).
	ioctlNVMeAdmin = 0xc0484e41
	// nvmeAdminGetLogPage is the admin opcode of Get Log Page.
	nvmeAdminGetLogPage = 0x02
	// sgDxferNone is SG_DXFER_NONE: a command that moves no data.
	sgDxferNone = -1
	// ioctlTimeoutMS bounds each command in the kernel.
	ioctlTimeoutMS = 10_000
	// openDirect is O_DIRECT: disk-read reads past the page cache.
	openDirect = unix.O_DIRECT
)

// nvmeAdminCmd is struct nvme_admin_cmd (struct nvme_passthru_cmd).
type nvmeAdminCmd struct {
	opcode      uint8
	flags       uint8
	rsvd1       uint16
	nsid        uint32
	cdw2        uint32
	cdw3        uint32
	metadata    uint64
	addr        uint64
	metadataLen uint32
	dataLen     uint32
	cdw10       uint32
	cdw11       uint32
	cdw12       uint32
	cdw13       uint32
	cdw14       uint32
	cdw15       uint32
	timeoutMS   uint32
	result      uint32
}

// sgIOHdr is struct sg_io_hdr (scsi/sg.h); Go's alignment of its fields
// is C's.
type sgIOHdr struct {
	interfaceID    int32
	dxferDirection int32
	cmdLen         uint8
	mxSbLen        uint8
	iovecCount     uint16
	dxferLen       uint32
	dxferp         unsafe.Pointer
	cmdp           unsafe.Pointer
	sbp            unsafe.Pointer
	timeout        uint32
	flags          uint32
	packID         int32
	usrPtr         unsafe.Pointer
	status         uint8
	maskedStatus   uint8
	msgStatus      uint8
	sbLenWr        uint8
	hostStatus     uint16
	driverStatus   uint16
	resid          int32
	duration       uint32
	info           uint32
}

// ioctlErr wraps errno as errNotSupported when it says the device does
// not know the request (ENOTTY, EINVAL, EOPNOTSUPP), which is how a
// virtio disk answers SG_IO.
func ioctlErr(name string, errno unix.Errno) error {
	switch errno {
	case unix.ENOTTY, unix.EINVAL, unix.EOPNOTSUPP, unix.ENOSYS:
		return fmt.Errorf("%w: ioctl %s: %v", errNotSupported, name, errno)
	}
	return fmt.Errorf("ioctl %s: %w", name, errno)
}

// nvmeLog reads log page id of the controller of the NVMe device f (a
// controller or namespace node) into buf: Get Log Page for every
// namespace (NSID FFFFFFFFh), as many dwords as buf holds.
func nvmeLog(f *os.File, id uint8, buf []byte) error {
	if len(buf) == 0 || len(buf)%4 != 0 {
		return errors.New("nvme log buffer must be whole dwords")
	}
	cmd := nvmeAdminCmd{
		opcode:    nvmeAdminGetLogPage,
		nsid:      0xffffffff,
		addr:      uint64(uintptr(unsafe.Pointer(&buf[0]))),
		dataLen:   uint32(len(buf)),
		cdw10:     uint32(len(buf)/4-1)<<16 | uint32(id),
		timeoutMS: ioctlTimeoutMS,
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlNVMeAdmin, uintptr(unsafe.Pointer(&cmd)))
	runtime.KeepAlive(buf)
	if errno != 0 {
		return ioctlErr("NVME_IOCTL_ADMIN_CMD", errno)
	}
	if cmd.result != 0 {
		return fmt.Errorf("NVMe command result 0x%x", cmd.result)
	}
	return nil
}

// sgIO sends the non-data SCSI command cdb to f and returns how many
// bytes of sense data the device wrote into sense.
func sgIO(f *os.File, cdb, sense []byte) (int, error) {
	if len(cdb) == 0 || len(sense) == 0 || len(sense) > 255 {
		return 0, errors.New("SG_IO needs a command and up to 255 bytes of sense buffer")
	}
	h := sgIOHdr{
		interfaceID:    'S',
		dxferDirection: sgDxferNone,
		cmdLen:         uint8(len(cdb)),
		mxSbLen:        uint8(len(sense)),
		cmdp:           unsafe.Pointer(&cdb[0]),
		sbp:            unsafe.Pointer(&sense[0]),
		timeout:        ioctlTimeoutMS,
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlSGIO, uintptr(unsafe.Pointer(&h)))
	runtime.KeepAlive(cdb)
	runtime.KeepAlive(sense)
	if errno != 0 {
		return 0, ioctlErr("SG_IO", errno)
	}
	return int(h.sbLenWr), nil
}
