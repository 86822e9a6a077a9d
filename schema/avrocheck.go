package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// avroCheck walks one Avro datum's binary encoding against its schema
// without building it: every item is skipped, not decoded into a value.
// It bounds what a small payload can make it do: the items of all arrays
// and maps together (an item may take zero bytes, so a count alone could
// be 2^62), and the nesting of recursive records.
type avroCheck struct {
	b        []byte
	i        int
	items    int // items left to allow
	depth    int
	maxDepth int
}

// avroSlackItems is how many items beyond one per payload byte a datum may
// hold (items of zero bytes: nulls, empty records, fixed of size 0).
const avroSlackItems = 4096

const avroMaxDepth = 1000

var errAvroShort = errors.New("the datum ends early")

func validateAvro(schema avro.Schema, value []byte) error {
	c := &avroCheck{b: value, items: len(value) + avroSlackItems, maxDepth: avroMaxDepth}
	if err := c.datum(schema); err != nil {
		return err
	}
	if c.i != len(c.b) {
		return fmt.Errorf("%d bytes after the datum", len(c.b)-c.i)
	}
	return nil
}

func (c *avroCheck) datum(s avro.Schema) error {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > c.maxDepth {
		return fmt.Errorf("nested deeper than %d", c.maxDepth)
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		return c.datum(s.Schema())
	case *avro.RecordSchema:
		for _, f := range s.Fields() {
			if err := c.datum(f.Type()); err != nil {
				return fmt.Errorf("%s: %w", f.Name(), err)
			}
		}
		return nil
	case *avro.EnumSchema:
		n, err := c.long()
		if err == nil && (n < 0 || n >= int64(len(s.Symbols()))) {
			err = fmt.Errorf("enum index %d of %d symbols", n, len(s.Symbols()))
		}
		return err
	case *avro.ArraySchema:
		return c.blocks(func() error { return c.datum(s.Items()) })
	case *avro.MapSchema:
		return c.blocks(func() error {
			if err := c.text(); err != nil {
				return err
			}
			return c.datum(s.Values())
		})
	case *avro.UnionSchema:
		n, err := c.long()
		if err != nil {
			return err
		}
		if n < 0 || n >= int64(len(s.Types())) {
			return fmt.Errorf("union branch %d of %d", n, len(s.Types()))
		}
		return c.datum(s.Types()[n])
	case *avro.FixedSchema:
		return c.skip(int64(s.Size()))
	}
	return c.primitive(s.Type())
}

func (c *avroCheck) primitive(t avro.Type) error {
	switch t {
	case avro.Null:
		return nil
	case avro.Boolean:
		if c.i >= len(c.b) {
			return errAvroShort
		}
		if c.b[c.i] > 1 {
			return fmt.Errorf("boolean byte %d", c.b[c.i])
		}
		c.i++
		return nil
	case avro.Int:
		n, err := c.long()
		if err == nil && int64(int32(n)) != n {
			err = fmt.Errorf("int %d beyond 32 bits", n)
		}
		return err
	case avro.Long:
		_, err := c.long()
		return err
	case avro.Float:
		return c.skip(4)
	case avro.Double:
		return c.skip(8)
	case avro.Bytes:
		n, err := c.long()
		if err != nil {
			return err
		}
		return c.skip(n)
	case avro.String:
		return c.text()
	}
	return fmt.Errorf("unsupported type %s", t)
}

// blocks walks an array's or a map's blocks: a count, negative when a
// byte size follows, until a count of 0.
func (c *avroCheck) blocks(item func() error) error {
	for {
		n, err := c.long()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if n < 0 {
			if n == -1<<63 {
				return errors.New("bad block count")
			}
			n = -n
			if _, err := c.long(); err != nil { // the block's size in bytes
				return err
			}
		}
		if n > int64(c.items) {
			return fmt.Errorf("more than %d items in a %d-byte datum", len(c.b)+avroSlackItems, len(c.b))
		}
		c.items -= int(n)
		for range n {
			if err := item(); err != nil {
				return err
			}
		}
	}
}

// long reads a zig-zag varint of at most 10 bytes.
func (c *avroCheck) long() (int64, error) {
	u, n := binary.Uvarint(c.b[c.i:])
	if n <= 0 {
		return 0, errAvroShort
	}
	c.i += n
	return int64(u>>1) ^ -int64(u&1), nil
}

func (c *avroCheck) skip(n int64) error {
	if n < 0 || n > int64(len(c.b)-c.i) {
		return errAvroShort
	}
	c.i += int(n)
	return nil
}

func (c *avroCheck) text() error {
	n, err := c.long()
	if err != nil {
		return err
	}
	start := c.i
	if err := c.skip(n); err != nil {
		return err
	}
	if !utf8.Valid(c.b[start:c.i]) {
		return errors.New("a string that is not UTF-8")
	}
	return nil
}
