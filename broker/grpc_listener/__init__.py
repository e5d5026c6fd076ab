"""The gRPC front door (the ``GRPC://`` endpoint): the ``Broker`` and ``Control`` services
of ``proto/wire/minibroker.proto`` (:mod:`~broker.grpc_listener.services`,
:mod:`~broker.grpc_listener.control_service`), and the server
interceptors every call passes (request metrics, undecodable requests, who may act as a
broker). It translates; what a request means is in :mod:`broker.request_handlers` and below.
"""
