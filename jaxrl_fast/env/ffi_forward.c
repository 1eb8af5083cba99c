/* EnvPool's XLA handlers behind one target whose programs the persistent cache can keep.
 *
 * EnvPool's handlers find their pool through the custom call's `handle` attribute, the pool's
 * address in this process, which XLA compiles into the program. Programs here call
 * `jaxrl_fast_forward_{cpu,gpu}` with one attribute, `slot`, a number this process gave the pool;
 * the forwarder calls EnvPool's handler with the same call frame, its attributes replaced by
 * `handle = <the slot's address>`. Built by `ffi_forward.py` against the installed jaxlib's
 * header, so the structs are that XLA's.
 *
 * The same library holds `jaxrl_fast_host_cpu`, a target for envs stepped in Python (Gymnasium's):
 * it hands the buffers' data pointers and the call's `slot` to one callback that Python sets
 * (a ctypes function, which takes the GIL), so such a program names a number, not a Python
 * object, and the persistent cache can keep it as it keeps EnvPool's. */
#include <stddef.h>
#include <stdint.h>

#include "xla/ffi/api/c_api.h"

enum { MAX_SLOTS = 4096, CPU = 0, GPU = 1 };

typedef struct {
  XLA_FFI_Handler* handler[2]; /* EnvPool's, per platform */
  int64_t address;
  XLA_FFI_Scalar scalar;
  XLA_FFI_ByteSpan name;
  XLA_FFI_ByteSpan* names[1];
  XLA_FFI_AttrType types[1];
  void* values[1];
} Slot;

static Slot slots[MAX_SLOTS];
static XLA_FFI_Handler* first[2]; /* answers XLA's metadata queries, per platform */

int jaxrl_fast_forward_max_slots(void) { return MAX_SLOTS; }

/* Set before any program that names `slot` is compiled; read-only afterwards. */
int jaxrl_fast_forward_set(int64_t slot, void* cpu_handler, void* gpu_handler, int64_t address) {
  if (slot < 0 || slot >= MAX_SLOTS) return -1;
  Slot* s = &slots[slot];
  s->handler[CPU] = (XLA_FFI_Handler*)cpu_handler;
  s->handler[GPU] = (XLA_FFI_Handler*)gpu_handler;
  for (int p = CPU; p <= GPU; ++p)
    if (first[p] == NULL) first[p] = s->handler[p];
  s->address = address;
  s->scalar.dtype = XLA_FFI_DataType_S64;
  s->scalar.value = &s->address;
  s->name.ptr = "handle";
  s->name.len = 6;
  s->names[0] = &s->name;
  s->types[0] = XLA_FFI_AttrType_SCALAR;
  s->values[0] = &s->scalar;
  return 0;
}

static XLA_FFI_Error* fail(XLA_FFI_CallFrame* frame, const char* message) {
  XLA_FFI_Error_Create_Args args = {XLA_FFI_Error_Create_Args_STRUCT_SIZE, NULL, message,
                                    XLA_FFI_Error_Code_INVALID_ARGUMENT};
  return frame->api->XLA_FFI_Error_Create(&args);
}

static XLA_FFI_Error* forward(XLA_FFI_CallFrame* frame, int platform) {
  if (frame->extension_start != NULL) { /* XLA's metadata query: EnvPool's handler answers it */
    return first[platform] ? first[platform](frame) : fail(frame, "jaxrl_fast forwarder: no EnvPool handler yet");
  }
  const XLA_FFI_Attrs* attrs = &frame->attrs;
  if (attrs->size != 1 || attrs->types[0] != XLA_FFI_AttrType_SCALAR)
    return fail(frame, "jaxrl_fast forwarder: expected one scalar attribute, slot");
  const XLA_FFI_Scalar* slot_attr = (const XLA_FFI_Scalar*)attrs->attrs[0];
  if (slot_attr->dtype != XLA_FFI_DataType_S64) return fail(frame, "jaxrl_fast forwarder: slot is not int64");
  int64_t slot = *(const int64_t*)slot_attr->value;
  if (slot < 0 || slot >= MAX_SLOTS || slots[slot].handler[platform] == NULL)
    return fail(frame, "jaxrl_fast forwarder: no EnvPool handler in this slot");
  const Slot* s = &slots[slot];
  XLA_FFI_CallFrame call = *frame;
  call.attrs.size = 1;
  call.attrs.types = (XLA_FFI_AttrType*)s->types;
  call.attrs.names = (XLA_FFI_ByteSpan**)s->names;
  call.attrs.attrs = (void**)s->values;
  return s->handler[platform](&call);
}

XLA_FFI_Error* jaxrl_fast_forward_cpu(XLA_FFI_CallFrame* frame) { return forward(frame, CPU); }
XLA_FFI_Error* jaxrl_fast_forward_gpu(XLA_FFI_CallFrame* frame) { return forward(frame, GPU); }

/* ---- Envs stepped in Python ---- */

enum { MAX_BUFFERS = 16, MESSAGE_SIZE = 1024 };

/* Returns 0, or nonzero after writing why (NUL-terminated) into `message`. */
typedef int (*HostStep)(int64_t slot, void** args, void** rets, char* message, int64_t message_size);

static HostStep host_step;

/* Set once, before any program that names the host target is compiled. */
void jaxrl_fast_host_set(HostStep step) { host_step = step; }

static XLA_FFI_Error* metadata(XLA_FFI_CallFrame* frame) {
  XLA_FFI_Metadata_Extension* extension = (XLA_FFI_Metadata_Extension*)frame->extension_start;
  extension->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
  extension->metadata->api_version.extension_start = NULL;
  extension->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
  extension->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
  extension->metadata->traits = 0;
  return NULL;
}

XLA_FFI_Error* jaxrl_fast_host_cpu(XLA_FFI_CallFrame* frame) {
  /* XLA's metadata query (its frame has no api): answered here; other extensions are ignored, as
   * XLA's own handlers ignore them */
  if (frame->extension_start != NULL && frame->extension_start->type == XLA_FFI_Extension_Metadata)
    return metadata(frame);
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  const XLA_FFI_Attrs* attrs = &frame->attrs;
  if (attrs->size != 1 || attrs->types[0] != XLA_FFI_AttrType_SCALAR)
    return fail(frame, "jaxrl_fast host step: expected one scalar attribute, slot");
  const XLA_FFI_Scalar* slot_attr = (const XLA_FFI_Scalar*)attrs->attrs[0];
  if (slot_attr->dtype != XLA_FFI_DataType_S64) return fail(frame, "jaxrl_fast host step: slot is not int64");
  if (*(const int64_t*)slot_attr->value < 0) return fail(frame, "jaxrl_fast host step: negative slot");
  if (host_step == NULL) return fail(frame, "jaxrl_fast host step: no Python step set in this process");
  if (frame->args.size > MAX_BUFFERS || frame->rets.size > MAX_BUFFERS)
    return fail(frame, "jaxrl_fast host step: too many buffers");
  void* args[MAX_BUFFERS];
  void* rets[MAX_BUFFERS];
  for (int64_t i = 0; i < frame->args.size; ++i) args[i] = ((XLA_FFI_Buffer*)frame->args.args[i])->data;
  for (int64_t i = 0; i < frame->rets.size; ++i) rets[i] = ((XLA_FFI_Buffer*)frame->rets.rets[i])->data;
  char message[MESSAGE_SIZE] = "";
  if (host_step(*(const int64_t*)slot_attr->value, args, rets, message, MESSAGE_SIZE) != 0)
    return fail(frame, message); /* XLA copies the message into its status */
  return NULL;
}
