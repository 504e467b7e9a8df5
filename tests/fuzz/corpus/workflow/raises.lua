error('cannot configure')
