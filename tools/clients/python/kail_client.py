#!/usr/bin/env python3
"""A KailStream gRPC client in Python: runs one generation against an engine or a scheduler.

Uses Debian's python3-grpcio and python3-grpc-tools (apt-get install python3-grpcio
python3-grpc-tools). The stubs are generated from the repository's proto/ into a temporary
directory at run time, so nothing generated is committed for Python.

  kail_client.py --engine HOST:PORT --model ID --prompt TEXT [--max-tokens N] [--token T]
  kail_client.py --scheduler HOST:PORT --model ID --prompt TEXT [--tenant T] [--priority N]

The bearer token (for services started with --auth-token) comes from --token or KAIL_GRPC_TOKEN.
Prints the streamed text to stderr as it arrives and one JSON line with the result to stdout.
"""
import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO = os.path.normpath(os.path.join(HERE, '..', '..', '..', 'proto'))
PROTOS = ['kailstream/common/v1/common.proto', 'kailstream/engine/v1/engine.proto', 'kailstream/scheduler/v1/scheduler.proto']


def generate_stubs(proto_dir, out_dir):
    """Runs grpc_tools.protoc on the KailStream contracts; returns the imported modules."""
    from grpc_tools import protoc

    for p in PROTOS:
        if not os.path.isfile(os.path.join(proto_dir, p)):
            sys.exit(f'kail_client: {p} not found under {proto_dir} (use --proto-dir)')
    # protoc needs the well-known types' include path only if a contract imports them (ours do not).
    rc = protoc.main(['grpc_tools.protoc', f'-I{proto_dir}', f'--python_out={out_dir}', f'--grpc_python_out={out_dir}'] + [os.path.join(proto_dir, p) for p in PROTOS])
    if rc != 0:
        sys.exit(f'kail_client: protoc failed with status {rc}')
    sys.path.insert(0, out_dir)
    mods = {}
    for name in ['common', 'engine', 'scheduler']:
        mods[name] = importlib.import_module(f'kailstream.{name}.v1.{name}_pb2')
        mods[name + '_grpc'] = importlib.import_module(f'kailstream.{name}.v1.{name}_pb2_grpc')
    return mods


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = ap.add_mutually_exclusive_group(required=True)
    target.add_argument('--engine', help='engine service address host:port')
    target.add_argument('--scheduler', help='scheduler service address host:port')
    ap.add_argument('--model', required=True)
    ap.add_argument('--prompt', required=True)
    ap.add_argument('--max-tokens', type=int, default=16)
    ap.add_argument('--tenant', default='python')
    ap.add_argument('--priority', type=int, default=0)
    ap.add_argument('--token', default=os.environ.get('KAIL_GRPC_TOKEN', ''))
    ap.add_argument('--proto-dir', default=DEFAULT_PROTO)
    ap.add_argument('--timeout', type=float, default=60.0, help='seconds for the whole generation')
    args = ap.parse_args()

    try:
        import grpc
    except ImportError:
        sys.exit('kail_client: the grpc module is missing; install python3-grpcio and python3-grpc-tools (Debian)')

    out_dir = tempfile.mkdtemp(prefix='kail-pystubs-')
    try:
        m = generate_stubs(args.proto_dir, out_dir)
        metadata = [('authorization', f'Bearer {args.token}')] if args.token else []
        address = args.engine or args.scheduler
        channel = grpc.insecure_channel(address)
        common = m['common']
        if args.engine:
            stub = m['engine_grpc'].EngineServiceStub(channel)
        else:
            stub = m['scheduler_grpc'].SchedulerServiceStub(channel)
        try:
            health = stub.Health(common.HealthRequest(), timeout=10)
            models = [x.id for x in stub.ListModels(m['engine' if args.engine else 'scheduler'].ListModelsRequest(), metadata=metadata, timeout=10).models]
        except grpc.RpcError as e:
            print(json.dumps({'target': 'engine' if args.engine else 'scheduler', 'error': {'code': e.code().name, 'details': e.details()}}))
            return 2
        gen = m['engine'].GenerateRequest(request_id=f'py-{uuid.uuid4().hex[:12]}', model=args.model, prompt=args.prompt, max_tokens=args.max_tokens)
        if args.engine:
            stream = stub.Generate(gen, metadata=metadata, timeout=args.timeout)
        else:
            stream = stub.Submit(m['scheduler'].SubmitRequest(generate=gen, tenant=args.tenant, priority=args.priority), metadata=metadata, timeout=args.timeout)
        text, tokens, last = [], [], None
        try:
            for chunk in stream:
                text.append(chunk.text)
                tokens.extend(chunk.tokens)
                sys.stderr.write(chunk.text)
                sys.stderr.flush()
                last = chunk
        except grpc.RpcError as e:
            print(json.dumps({'target': 'engine' if args.engine else 'scheduler', 'error': {'code': e.code().name, 'details': e.details()}}))
            return 2
        sys.stderr.write('\n')
        result = {
            'target': 'engine' if args.engine else 'scheduler',
            'address': address,
            'health': common.ServingStatus.Name(health.status),
            'version': health.version,
            'models': models,
            'model': args.model,
            'text': ''.join(text),
            'tokens': tokens,
            'finish_reason': common.FinishReason.Name(last.finish_reason) if last else None,
            'usage': {'prompt_tokens': last.usage.prompt_tokens, 'completion_tokens': last.usage.completion_tokens} if last else None,
        }
        print(json.dumps(result))
        channel.close()
        return 0
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
