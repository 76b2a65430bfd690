"""The settings of the detection program, one object the other modules import."""


class AttrDict(dict):
    """A dict whose keys read as attributes; frozen once finalized."""

    _frozen = False

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key)

    def __setattr__(self, key, value):
        if self._frozen:
            raise RuntimeError('config is frozen: cannot set {}'.format(key))
        self[key] = value

    def freeze(self):
        object.__setattr__(self, '_frozen', True)


config = AttrDict()
config.IMAGE_SIZE = 32
config.BACKBONE_STRIDE = 4
config.ANCHOR_SIZES = (8, 14)
config.RPN = AttrDict(POSITIVE_IOU=0.5, NEGATIVE_IOU=0.3, PRE_NMS_TOPK=48, POST_NMS_TOPK=8, NMS_IOU=0.7)
config.FRCNN = AttrDict(FG_IOU=0.5, ROI_SIZE=4)
config.TRAIN = AttrDict(LR=1e-2, STEPS_PER_EPOCH=5, EPOCHS=2)
config.BBOX_CLIP = 4.0


def finalize_configs():
    config.NUM_ANCHOR = len(config.ANCHOR_SIZES)
    config.FEATURE_SIZE = config.IMAGE_SIZE // config.BACKBONE_STRIDE
    config.freeze()
