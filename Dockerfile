# blurd's container image, in two flavours from the same stages. The base images are build
# arguments: BUILD_BASE for the build stage, which runs CI's own steps (scripts/install-deps.sh,
# then make), and RUN_BASE for the runtime stage, which holds build/blurd, the libraries it links
# and curl for the health check, as the non-root user 10001. The Makefile builds the CUDA backend
# when the build stage has nvcc, and the CPU backend alone when it has not.
#
# CUDA (the default): the CUDA 13.0 devel image, whose nvjpeg.h make checks gpu/nvjpeg_api.h
# against, and the matching runtime image. The CUDA runtime is linked statically, so the image
# needs only the host's driver (--gpus all); nvJPEG (libnvjpeg.so.13, which the runtime image
# ships) is loaded at run time for the GPU codecs, and the build fails if a CUDA build's image
# lacks it. The Makefile's CUDA_ARCH builds real code for sm_75, sm_80, sm_86, sm_89 and sm_90
# (Turing, Ampere, Ada, Hopper) and compute_90 PTX, which the driver compiles on a later GPU
# (Blackwell) when blurd loads its kernels. Without a GPU blurd serves on the CPU.
#
#   docker build -t blurd .
#   docker run --gpus all -p 8080:8080 blurd
#
# CPU only: Debian 12 (or Ubuntu 24.04) for both stages; no nvcc, so blurd serves on the CPU.
# make image-test (scripts/image-test.sh) builds this flavour with podman and runs it.
#
#   docker build --build-arg BUILD_BASE=debian:bookworm --build-arg RUN_BASE=debian:bookworm \
#     -t blurd:cpu .
#   docker run --read-only -p 8080:8080 blurd:cpu
ARG BUILD_BASE=nvidia/cuda:13.0.0-devel-ubuntu24.04
ARG RUN_BASE=nvidia/cuda:13.0.0-runtime-ubuntu24.04

FROM ${BUILD_BASE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/
RUN bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN make -j"$(nproc)"

FROM ${RUN_BASE}
COPY scripts/install-deps.sh /tmp/
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
    && groupadd --gid 10001 blurd \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin blurd
COPY --from=build /src/build/blurd /usr/local/bin/blurd
# blurd --version runs the binary against the image's libraries and names the backends built
# in; a CUDA build needs nvJPEG too.
RUN version=$(/usr/local/bin/blurd --version) && echo "$version" \
    && case "$version" in *cuda*) ldconfig -p | grep -q 'libnvjpeg\.so\.13 ' ;; esac
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
# The NVIDIA container runtime mounts the driver's libraries by capability: video brings
# libnvcuvid, which HEIC's decode on the GPU's video decoders needs (compute and utility are the
# CUDA images' own).
ENV BLURD_BIND=0.0.0.0 \
    BLURD_PORT=8080 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,video
EXPOSE 8080
# On SIGTERM blurd drains for up to --drain-timeout (30 s): give `docker stop -t` at least that.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD curl -fsS -o /dev/null "http://127.0.0.1:${BLURD_PORT}/healthz" || exit 1
ENTRYPOINT ["/usr/local/bin/blurd"]
