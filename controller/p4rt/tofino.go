package p4rt

import (
	"strings"
	"sync"

	p4config "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// p4c-barefoot's TNA P4Info (p4/build/tofino) lists counters and registers
// as Tofino externs: an instance keeps its P4Runtime preamble, and its
// details are an Any of Barefoot's own proto (barefoot.Counter,
// barefoot.Register, ...), which this module does not have. A text P4Info
// names those types, so parsing it needs them resolved: each barefoot.*
// type resolves to a stub message that keeps only `size` (field 2 in
// Barefoot's p4info.proto, after the spec), the one detail netdir uses.

const (
	tofinoCounter  = "Counter"
	tofinoRegister = "Register"
	barefootPkg    = "barefoot."
	barefootSize   = 2
)

// barefootResolver resolves the global registry's types, and barefoot.*
// types to stubs.
type barefootResolver struct {
	mu    sync.Mutex
	stubs map[protoreflect.FullName]protoreflect.MessageType
}

var barefootTypes = &barefootResolver{stubs: map[protoreflect.FullName]protoreflect.MessageType{}}

func (r *barefootResolver) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	if !strings.HasPrefix(string(name), barefootPkg) {
		return protoregistry.GlobalTypes.FindMessageByName(name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if mt, ok := r.stubs[name]; ok {
		return mt, nil
	}
	short := strings.TrimPrefix(string(name), barefootPkg)
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("netdir-stub/" + short + ".proto"),
		Package: proto.String(strings.TrimSuffix(barefootPkg, ".")),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String(short),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name:     proto.String("size"),
				JsonName: proto.String("size"),
				Number:   proto.Int32(barefootSize),
				Type:     descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(),
				Label:    descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			}},
		}},
	}, nil)
	if err != nil {
		return nil, err
	}
	mt := dynamicpb.NewMessageType(fd.Messages().Get(0))
	r.stubs[name] = mt
	return mt, nil
}

func (r *barefootResolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	name := url
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		name = url[i+1:]
	}
	return r.FindMessageByName(protoreflect.FullName(name))
}

func (r *barefootResolver) FindExtensionByName(name protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByName(name)
}

func (r *barefootResolver) FindExtensionByNumber(m protoreflect.FullName, n protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByNumber(m, n)
}

// externSize is the size in a Tofino extern instance's details (0 if
// absent), read from the wire form, so that it works whichever message
// type decoded the P4Info.
func externSize(in *p4config.ExternInstance) int64 {
	b := in.GetInfo().GetValue()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if num == barefootSize && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0
			}
			return int64(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0
		}
		b = b[n:]
	}
	return 0
}

// TofinoCounters are the Tofino Counter externs of info as P4Runtime
// counters (preamble and size), for the code that serves or reads them.
func TofinoCounters(info *p4config.P4Info) []*p4config.Counter {
	var out []*p4config.Counter
	for _, in := range tofinoInstances(info, tofinoCounter) {
		out = append(out, &p4config.Counter{Preamble: in.GetPreamble(), Size: externSize(in),
			Spec: &p4config.CounterSpec{Unit: p4config.CounterSpec_PACKETS}})
	}
	return out
}

// TofinoRegisters are the Tofino Register externs of info as P4Runtime
// registers (preamble and size).
func TofinoRegisters(info *p4config.P4Info) []*p4config.Register {
	var out []*p4config.Register
	for _, in := range tofinoInstances(info, tofinoRegister) {
		out = append(out, &p4config.Register{Preamble: in.GetPreamble(), Size: int32(externSize(in))})
	}
	return out
}

func tofinoInstances(info *p4config.P4Info, typ string) []*p4config.ExternInstance {
	var out []*p4config.ExternInstance
	for _, e := range info.GetExterns() {
		if e.GetExternTypeName() == typ {
			out = append(out, e.GetInstances()...)
		}
	}
	return out
}
