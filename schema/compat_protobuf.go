package schema

import (
	"context"
	"fmt"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// parseProtobuf compiles one .proto file; it may import only the
// well-known google/protobuf/*.proto files (no references yet), and no
// file is ever read from disk.
func parseProtobuf(text string) (protoreflect.FileDescriptor, error) {
	const name = "schema.proto"
	compiler := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{name: text}),
	})}
	files, err := compiler.Compile(context.Background(), name)
	if err != nil {
		return nil, err
	}
	if files[0].Messages().Len() == 0 {
		return nil, fmt.Errorf("no message: the first message is the record type")
	}
	return files[0], nil
}

// Protobuf compatibility follows the wire format, as Confluent's does for
// the first message of the file (the record type): fields are matched by
// number, so renaming is compatible; a writer field the reader lacks is
// skipped as unknown; a reader field the writer lacks reads its default,
// unless it is proto2 required. Matched fields must keep their wire
// encoding: kinds within one group below, message fields recursively,
// and repeated stays repeated.
var protoKindGroups = map[protoreflect.Kind]int{
	protoreflect.Int32Kind: 1, protoreflect.Uint32Kind: 1, protoreflect.Int64Kind: 1,
	protoreflect.Uint64Kind: 1, protoreflect.BoolKind: 1, protoreflect.EnumKind: 1,
	protoreflect.Sint32Kind: 2, protoreflect.Sint64Kind: 2,
	protoreflect.Fixed32Kind: 3, protoreflect.Sfixed32Kind: 3,
	protoreflect.Fixed64Kind: 4, protoreflect.Sfixed64Kind: 4,
	protoreflect.StringKind: 5, protoreflect.BytesKind: 5,
	protoreflect.FloatKind: 6, protoreflect.DoubleKind: 7,
	protoreflect.MessageKind: 8, protoreflect.GroupKind: 9,
}

func protoReadable(reader, writer protoreflect.FileDescriptor) string {
	seen := map[[2]protoreflect.FullName]bool{}
	return protoMessage(reader.Messages().Get(0), writer.Messages().Get(0), seen)
}

func protoMessage(reader, writer protoreflect.MessageDescriptor, seen map[[2]protoreflect.FullName]bool) string {
	pair := [2]protoreflect.FullName{reader.FullName(), writer.FullName()}
	if seen[pair] {
		return ""
	}
	seen[pair] = true
	writerFields, readerFields := writer.Fields(), reader.Fields()
	for i := range writerFields.Len() {
		wf := writerFields.Get(i)
		if rf := readerFields.ByNumber(wf.Number()); rf != nil {
			if reason := protoField(rf, wf, seen); reason != "" {
				return reason
			}
		}
	}
	for i := range readerFields.Len() {
		rf := readerFields.Get(i)
		if rf.Cardinality() == protoreflect.Required && writerFields.ByNumber(rf.Number()) == nil {
			return fmt.Sprintf("%s: required field %s (%d) added", reader.FullName(), rf.Name(), rf.Number())
		}
	}
	return ""
}

func protoField(rf, wf protoreflect.FieldDescriptor, seen map[[2]protoreflect.FullName]bool) string {
	at := fmt.Sprintf("%s.%s (%d)", rf.ContainingMessage().FullName(), rf.Name(), rf.Number())
	if (rf.Cardinality() == protoreflect.Repeated) != (wf.Cardinality() == protoreflect.Repeated) {
		return at + ": changed between repeated and singular"
	}
	if rf.IsMap() != wf.IsMap() {
		return at + ": changed between a map and a list"
	}
	if protoKindGroups[rf.Kind()] != protoKindGroups[wf.Kind()] {
		return fmt.Sprintf("%s: type changed from %s to %s", at, wf.Kind(), rf.Kind())
	}
	if rf.Kind() == protoreflect.MessageKind || rf.Kind() == protoreflect.GroupKind {
		return protoMessage(rf.Message(), wf.Message(), seen)
	}
	return ""
}
